--[[
  End a started job in a failure state: `failed` (exception, retries exhausted, invalid payload)
  or `dropped` (no function for its name and version). Under dead_letter_policy `save` it goes
  into the DLQ and is kept until trimmed; under `none` it is kept for result_ttl, then removed.
  KEYS[1] started ZSET   KEYS[2] dlq ZSET   KEYS[3] done ZSET   KEYS[4] events STREAM   KEYS[5] stats HASH
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] job id   ARGV[5] token
  ARGV[6] state (failed | dropped)   ARGV[7] error JSON object   ARGV[8] short error for the event
  ARGV[9] '1' to save in the DLQ, '0' not to   ARGV[10] result_ttl_ms
  Returns: 0 done, -1 not found, -2 lease lost, -3 not started.
  Events: started -> failed | dropped.
]]
--@include common
local started, dlq, done, events, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, maxlen, worker, id, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local state, err, short, save, ttl = ARGV[6], ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10])
local key = prefix .. id
local cur = rcall('HMGET', key, 'state', 'token', 'attempt')
if not cur[1] then return -1 end
if cur[2] ~= token then return -2 end
if cur[1] ~= 'started' then return -3 end
local now = now_ms()
append_error(key, err)
rcall('HSET', key, 'state', state, 'completed_at_ms', fmt(now))
rcall('HDEL', key, 'token')
rcall('ZREM', started, id)
if save == '1' then
  rcall('ZADD', dlq, fmt(now), id)
else
  rcall('ZADD', done, fmt(now + ttl), id)
  rcall('PEXPIRE', key, ttl)
end
rcall('HINCRBY', stats, state, 1)
emit(events, maxlen, id, 'started', state, now, cur[3], worker, short)
return 0
