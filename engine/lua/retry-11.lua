--[[
  Retry a started job, fenced by its token: to `scheduled` after a delay (giving back its
  concurrency slot until then), or straight back to `submitted`. A job with a pending cancel
  request ends `cancelled` instead (never retried).
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] job id   ARGV[5] token
  ARGV[6] delay_ms ('' re-queues now)   ARGV[7] error JSON object   ARGV[8] short error for the event
  ARGV[9] ttl_ms for a cancelled job
  Returns: 0 retried, 1 cancelled instead, -1 not found, -2 lease lost, -3 not started.
  Events: started -> scheduled | submitted | cancelled.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[9])
local worker, id, token = ARGV[3], ARGV[4], ARGV[5]
local delay, err, short = ARGV[6], ARGV[7], ARGV[8]
local key = Q.prefix .. id
local code, cur = owned(key, token, F.attempt, F.priority, F.cancel_requested_at_ms)
if code ~= 0 then return code end
local now = Q.now
append_error(key, err)
rcall('ZREM', Q.started, id)
wake_if_capped(Q)
if cur[5] then
  emit(Q, id, 'started', 'cancelled', cur[3], worker, short)
  bury(Q, key, id, 'cancelled')
  return 1
end
rcall('HDEL', key, F.token, F.isolated)
rcall('HSET', key, F.begun, '0')
local state = 'submitted'
if delay ~= '' then
  local due = now + tonumber(delay)
  state = 'scheduled'
  rcall('HSET', key, F.state, state, F.run_at_ms, fmt(due))
  rcall('ZADD', Q.scheduled, fmt(due), id)
  free_slot(Q, key, id)
else
  rcall('HSET', key, F.state, state, F.submitted_at_ms, fmt(now))
  make_ready(Q, key, id, cur[4], rcall('INCR', Q.seq))
end
emit(Q, id, 'started', state, cur[3], worker, short)
return 0
