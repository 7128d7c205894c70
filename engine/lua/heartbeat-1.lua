--[[
  Renew the leases of running jobs, fenced by their tokens; report cancel requests.
  KEYS[1] started ZSET (id -> lease deadline ms)
  ARGV[1] job key prefix   ARGV[2] number of jobs
  then per job: id, token, lease_ms, touch ('1' when the task itself called heartbeat())
  Returns: one code per job: 0 renewed, 1 renewed and cancel requested, -2 lease lost.
  Events: none.
]]
--@include common
local started = KEYS[1]
local prefix, count = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local out = {}
for j = 1, count do
  local i = 3 + (j - 1) * 4
  local id, token, lease_ms, touch = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local key = prefix .. id
  local cur = jget(key, F.token, F.cancel_requested_at_ms)
  if not cur[1] or cur[1] ~= token then
    out[j] = -2
  else
    rcall('ZADD', started, 'XX', fmt(now + lease_ms), id)
    if touch == '1' then rcall('HSET', key, F.heartbeat_at_ms, fmt(now)) end
    if cur[2] then out[j] = 1 else out[j] = 0 end
  end
end
return out
