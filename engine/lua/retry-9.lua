--[[
  Retry a started job, fenced by its token: to `scheduled` after a delay, or straight back to
  `submitted`. A job with a pending cancel request ends `cancelled` instead (never retried).
  KEYS[1] started ZSET   KEYS[2] submitted ZSET   KEYS[3] scheduled ZSET   KEYS[4] events STREAM
  KEYS[5] marker ZSET    KEYS[6] seq counter      KEYS[7] dlq ZSET         KEYS[8] done ZSET
  KEYS[9] stats HASH
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] job id   ARGV[5] token
  ARGV[6] delay_ms ('' re-queues now)   ARGV[7] error JSON object   ARGV[8] short error for the event
  ARGV[9] ttl_ms for a cancelled job
  Returns: 0 retried, 1 cancelled instead, -1 not found, -2 lease lost, -3 not started.
  Events: started -> scheduled | submitted | cancelled.
]]
--@include common
local started, submitted, scheduled, events, marker, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local dlq, done, stats = KEYS[7], KEYS[8], KEYS[9]
local prefix, maxlen, worker, id, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local delay, err, short = ARGV[6], ARGV[7], ARGV[8]
local key = prefix .. id
local code, cur = owned(key, token, 'attempt', 'priority', 'cancel_requested_at_ms')
if code ~= 0 then return code end
local now = now_ms()
append_error(key, err)
rcall('ZREM', started, id)
if cur[5] then
  bury(key, id, 'cancelled', now, dlq, done, stats, tonumber(ARGV[9]))
  emit(events, maxlen, id, 'started', 'cancelled', now, cur[3], worker, short)
  return 1
end
rcall('HDEL', key, 'token')
rcall('HSET', key, 'begun', '0')
local state = 'submitted'
if delay ~= '' then
  local due = now + tonumber(delay)
  state = 'scheduled'
  rcall('HSET', key, 'state', state, 'run_at_ms', fmt(due))
  rcall('ZADD', scheduled, fmt(due), id)
else
  rcall('HSET', key, 'state', state, 'submitted_at_ms', fmt(now))
  rcall('ZADD', submitted, ready_score(cur[4] or 0, rcall('INCR', seqkey)), id)
  rcall('ZADD', marker, 0, '0')
end
emit(events, maxlen, id, 'started', state, now, cur[3], worker, short)
return 0
