--[[
  Begin claimed jobs: count the attempt and stamp the start, just before user code runs.
  Also renews each lease, since a claimed job may have waited for a local slot. Observes each
  job's queue wait (from submitted_at_ms, when it last became ready, to now) in the `wait`
  histogram of stats (common.lua's observe).
  KEYS[1] started ZSET (id -> lease deadline ms)   KEYS[2] stats HASH
  ARGV[1] job key prefix   ARGV[2] lease_ms   ARGV[3] number of jobs
  ARGV[4] histogram bucket bounds in ms ("5,10,...")
  then per job: id, token, isolated ('1': it runs alone in a child process, see reap-11.lua)
  Returns: one code per job: the attempt number (>= 1), or -2 when the token no longer matches.
  Events: none (the job is already `started`).
]]
--@include common
local prefix, lease_ms, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local b = bounds(ARGV[4])
local t = now_ms()
local now, lease = fmt(t), fmt(t + lease_ms)
local out = {}
local wait = {}
for j = 1, count do
  local i = 5 + (j - 1) * 3
  local id, token, isolated = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local key = prefix .. id
  local cur = jget(key, F.token, F.begun, F.started_at_ms, F.task, F.submitted_at_ms)
  if cur[1] ~= token or cur[1] == false then
    out[j] = -2
  else
    local attempt = rcall('HINCRBY', key, F.attempt, 1)
    local fields = {}
    begin_fields(fields, cur[3], now, isolated)
    rcall('HSET', key, unpack(fields))
    rcall('ZADD', KEYS[1], 'XX', lease, id)
    if cur[5] then observe(wait, cur[4] or '', t - tonumber(cur[5]), b) end
    out[j] = attempt
  end
end
add_tally(KEYS[2], 'wait', wait, b)
return out
