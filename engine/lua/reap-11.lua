--[[
  Recover jobs whose worker died or hung, decided on Redis server time: jobs whose lease expired,
  and jobs held by workers the caller found dead (their liveness key lapsed), without waiting for
  those leases. A job its worker never began goes back to `submitted` without using an attempt or
  a stall. A begun one counts a stall (common.lua's stall: back to `submitted` while within
  max_stalls, else `stalled`), except when it ran isolated in a child process of a worker that
  died: the worker's death is not the job's doing, so it goes back without a stall.
  Also removes the claim fences of the dead workers (meta `stop:<worker id>`, set when a worker
  stops): one killed before it could remove its own would leave it there for ever.
  Safe with any number of cleaners at once.
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   ARGV[4] ttl_ms outside the DLQ
  ARGV[5..] ids of workers found dead (none: leases only)
  Returns: {released, stalled, orphans removed}.
  Events: started -> submitted | stalled.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[4])
local limit = tonumber(ARGV[3])
local now = Q.now
local dead = {}
for i = 5, #ARGV do dead[ARGV[i]] = true end
local ids = rcall('ZRANGEBYSCORE', Q.started, '-inf', fmt(now), 'LIMIT', 0, limit)
if #ARGV >= 5 then
  local seen = {}
  for _, id in ipairs(ids) do seen[id] = true end
  for _, id in ipairs(rcall('ZRANGE', Q.started, 0, limit - 1)) do
    if not seen[id] and dead[jget(Q.prefix .. id, F.worker)[1] or ''] then
      ids[#ids + 1] = id
    end
  end
end
local released, stalled, orphans = 0, 0, 0
for _, id in ipairs(ids) do
  local key = Q.prefix .. id
  local cur = jget(key, F.state, F.begun, F.attempt, F.worker, F.isolated)
  local worker = cur[4] or '?'
  if cur[1] ~= 'started' then
    rcall('ZREM', Q.started, id)
    orphans = orphans + 1
  elseif cur[2] ~= '1' then
    rcall('ZREM', Q.started, id)
    release(Q, key, id)
    emit(Q, id, 'started', 'submitted', cur[3] or '0', cur[4], 'claimed, never began; worker lost')
    released = released + 1
  elseif cur[5] == '1' and dead[worker] then
    rcall('ZREM', Q.started, id)
    release(Q, key, id)
    emit(Q, id, 'started', 'submitted', cur[3], cur[4], 'worker died while the job ran isolated')
    released = released + 1
  else
    local why = 'lease expired'
    if dead[worker] then why = 'worker died' end
    local err = '{"type":"Stalled","message":"' .. why .. ' (worker ' .. worker .. ')","attempt":' .. (cur[3] or '0') .. ',"at_ms":' .. fmt(now) .. '}'
    if stall(Q, key, id, cur[3], cur[4], err, why) == 1 then
      stalled = stalled + 1
    else
      released = released + 1
    end
  end
end
for worker, _ in pairs(dead) do rcall('HDEL', Q.meta, 'stop:' .. worker) end
if stalled + orphans > 0 then wake_if_capped(Q) end
return {released, stalled, orphans}
