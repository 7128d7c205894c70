--[[
  Resubmit finished jobs (failed, stalled, expired, dropped, cancelled) as a new attempt series.
  Errors of earlier attempts stay on the job; the attempt counter starts again.
  KEYS[1..12] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   then job ids
  Returns: one code per id: 0 resubmitted, -1 not found, -3 not in a resubmittable state.
  Events: <state> -> submitted.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2])
local allowed = {failed = true, stalled = true, expired = true, dropped = true, cancelled = true}
local out = {}
for j = 3, #ARGV do
  local id = ARGV[j]
  local key = Q.prefix .. id
  local cur = rcall('HMGET', key, 'state', 'priority')
  if not cur[1] then
    out[#out + 1] = -1
  elseif not allowed[cur[1]] then
    out[#out + 1] = -3
  else
    rcall('PERSIST', key)
    rcall('HSET', key, 'state', 'submitted', 'attempt', 0, 'stalls', 0, 'begun', '0',
          'submitted_at_ms', fmt(Q.now))
    rcall('HDEL', key, 'completed_at_ms', 'result', 'token', 'run_at_ms', 'deadline_ms',
          'cancel_requested_at_ms', 'progress', 'progress_message', 'rate_slot_ms')
    rcall('ZREM', Q.dlq, id)
    rcall('ZREM', Q.done, id)
    make_ready(Q, key, id, cur[2], rcall('INCR', Q.seq))
    emit(Q, id, cur[1], 'submitted', 0)
    out[#out + 1] = 0
  end
end
return out
