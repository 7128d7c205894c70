--[[
  Resubmit finished jobs (failed, stalled, expired, dropped, cancelled) as a new attempt series.
  Errors of earlier attempts stay on the job; the attempt counter starts again.
  KEYS[1] dlq ZSET   KEYS[2] done ZSET   KEYS[3] submitted ZSET   KEYS[4] events STREAM
  KEYS[5] marker ZSET   KEYS[6] seq counter
  ARGV[1] job key prefix   ARGV[2] events maxlen   then job ids
  Returns: one code per id: 0 resubmitted, -1 not found, -3 not in a resubmittable state.
  Events: <state> -> submitted.
]]
--@include common
local dlq, done, submitted, events, marker, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, maxlen = ARGV[1], ARGV[2]
local allowed = {failed = true, stalled = true, expired = true, dropped = true, cancelled = true}
local now = now_ms()
local out = {}
local woke = false
for j = 3, #ARGV do
  local id = ARGV[j]
  local key = prefix .. id
  local cur = rcall('HMGET', key, 'state', 'priority')
  if not cur[1] then
    out[#out + 1] = -1
  elseif not allowed[cur[1]] then
    out[#out + 1] = -3
  else
    rcall('PERSIST', key)
    rcall('HSET', key, 'state', 'submitted', 'attempt', 0, 'stalls', 0, 'begun', '0',
          'submitted_at_ms', fmt(now))
    rcall('HDEL', key, 'completed_at_ms', 'result', 'token', 'run_at_ms', 'deadline_ms',
          'cancel_requested_at_ms', 'progress', 'progress_message')
    rcall('ZREM', dlq, id)
    rcall('ZREM', done, id)
    rcall('ZADD', submitted, ready_score(cur[2] or 0, rcall('INCR', seqkey)), id)
    emit(events, maxlen, id, cur[1], 'submitted', now, 0)
    woke = true
    out[#out + 1] = 0
  end
end
if woke then rcall('ZADD', marker, 0, '0') end
return out
