--[[
  Recover jobs whose lease expired (their worker died or hung), decided on Redis server time.
  A job its worker never began goes back to `submitted` without using an attempt or a stall; a
  begun one goes back while its stalls stay within max_stalls (field, default 1), else it ends
  `stalled` (into the DLQ unless dlq is '0'). Safe with any number of cleaners at once.
  KEYS[1..12] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   ARGV[4] ttl_ms outside the DLQ
  Returns: {released, stalled, orphans removed}.
  Events: started -> submitted | stalled.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[4])
local limit = tonumber(ARGV[3])
local now = Q.now
local ids = rcall('ZRANGEBYSCORE', Q.started, '-inf', fmt(now), 'LIMIT', 0, limit)
local released, stalled, orphans = 0, 0, 0
for _, id in ipairs(ids) do
  local key = Q.prefix .. id
  local cur = rcall('HMGET', key, 'state', 'begun', 'stalls', 'max_stalls', 'attempt', 'worker')
  rcall('ZREM', Q.started, id)
  if cur[1] ~= 'started' then
    orphans = orphans + 1
  elseif cur[2] ~= '1' then
    release(Q, key, id)
    emit(Q, id, 'started', 'submitted', cur[5] or '0', cur[6], 'claimed, never began; worker lost')
    released = released + 1
  else
    local stalls = rcall('HINCRBY', key, 'stalls', 1)
    local err = '{"type":"Stalled","message":"lease expired (worker ' .. (cur[6] or '?') .. ')","attempt":' .. (cur[5] or '0') .. ',"at_ms":' .. fmt(now) .. '}'
    append_error(key, err)
    if stalls > tonumber(cur[4] or '1') then
      emit(Q, id, 'started', 'stalled', cur[5], cur[6], 'lease expired; max_stalls reached')
      bury(Q, key, id, 'stalled')
      stalled = stalled + 1
    else
      release(Q, key, id)
      emit(Q, id, 'started', 'submitted', cur[5], cur[6], 'lease expired; recovered')
      released = released + 1
    end
  end
end
return {released, stalled, orphans}
