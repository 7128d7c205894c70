--[[
  Deadlines of queued jobs, inlined by submit-13.lua (`--@include deadlines`).
  deadline_of(Q, key, due): the earliest of the job's limits (its hash's ttl_ms from now,
  good_until_ms, and queue_timeout_ms from when it is due: `due`, or now when nil); nil if none.
  set_deadline(Q, key, id, due): store that deadline on the job (deadline_ms) and in the
  deadlines ZSET, where expire-11.lua finds it; nothing when the job has none.
]]
local function deadline_of(Q, key, due)
  local now = Q.now
  local limits = rcall('HMGET', key, 'ttl_ms', 'good_until_ms', 'queue_timeout_ms')
  local deadline = nil
  if limits[1] then deadline = now + tonumber(limits[1]) end
  if limits[2] and (not deadline or tonumber(limits[2]) < deadline) then deadline = tonumber(limits[2]) end
  if limits[3] then
    local start = math.max(now, due or now)
    if not deadline or start + tonumber(limits[3]) < deadline then deadline = start + tonumber(limits[3]) end
  end
  return deadline
end

local function set_deadline(Q, key, id, due)
  local deadline = deadline_of(Q, key, due)
  if deadline then
    rcall('HSET', key, 'deadline_ms', fmt(deadline))
    rcall('ZADD', Q.deadlines, fmt(deadline), id)
  end
end
