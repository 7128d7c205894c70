--[[
  Recover jobs whose lease expired (their worker died or hung), decided on Redis server time.
  A job its worker never began goes back to `submitted` without using an attempt or a stall; a
  begun one goes back while its stalls stay within max_stalls (field, default 1), else it ends
  `stalled` (into the DLQ unless dlq is '0'). Safe with any number of cleaners at once.
  KEYS[1] started ZSET   KEYS[2] submitted ZSET   KEYS[3] dlq ZSET   KEYS[4] done ZSET
  KEYS[5] events STREAM  KEYS[6] marker ZSET      KEYS[7] stats HASH
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   ARGV[4] ttl_ms outside the DLQ
  Returns: {released, stalled, orphans removed}.
  Events: started -> submitted | stalled.
]]
--@include common
local started, submitted, dlq, done, events, marker, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local prefix, maxlen, limit, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local ids = rcall('ZRANGEBYSCORE', started, '-inf', fmt(now), 'LIMIT', 0, limit)
local released, stalled, orphans = 0, 0, 0
for _, id in ipairs(ids) do
  local key = prefix .. id
  local cur = rcall('HMGET', key, 'state', 'begun', 'stalls', 'max_stalls', 'attempt', 'worker')
  rcall('ZREM', started, id)
  if cur[1] ~= 'started' then
    orphans = orphans + 1
  elseif cur[2] ~= '1' then
    release(key, id, now, submitted, marker)
    emit(events, maxlen, id, 'started', 'submitted', now, cur[5] or '0', cur[6], 'claimed, never began; worker lost')
    released = released + 1
  else
    local stalls = rcall('HINCRBY', key, 'stalls', 1)
    local err = '{"type":"Stalled","message":"lease expired (worker ' .. (cur[6] or '?') .. ')","attempt":' .. (cur[5] or '0') .. ',"at_ms":' .. fmt(now) .. '}'
    append_error(key, err)
    if stalls > tonumber(cur[4] or '1') then
      bury(key, id, 'stalled', now, dlq, done, stats, ttl)
      emit(events, maxlen, id, 'started', 'stalled', now, cur[5], cur[6], 'lease expired; max_stalls reached')
      stalled = stalled + 1
    else
      release(key, id, now, submitted, marker)
      emit(events, maxlen, id, 'started', 'submitted', now, cur[5], cur[6], 'lease expired; recovered')
      released = released + 1
    end
  end
end
return {released, stalled, orphans}
