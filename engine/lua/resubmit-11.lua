--[[
  Resubmit finished jobs (failed, stalled, expired, dropped, cancelled) as a new attempt series.
  Errors of earlier attempts stay on the job, and so does its checkpoint (its task resumes from
  it); the attempt counter starts again. A job with
  parents waits again (`blocked`) for those whose end its runs_on field does not count
  (completed ones; failed ones too for runs_on 'failure', every ended one for 'end'), and is
  settled at once by one that already ended otherwise (common.lua's fail_child: its
  on_parent_failure, or `cancelled` for runs_on 'failure' when that parent completed or was
  cancelled).
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] children SET key prefix
  ARGV[4] ttl ms of a job that a dead parent ends again at once (its on_parent_failure)
  then job ids
  Returns: one code per id: 0 resubmitted, -1 not found, -3 not in a resubmittable state.
  Events: <state> -> submitted | blocked; blocked -> failed | cancelled (settled at once).
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[4])
Q.children = ARGV[3]
local allowed = {failed = true, stalled = true, expired = true, dropped = true, cancelled = true}
local out = {}
for j = 5, #ARGV do
  local id = ARGV[j]
  local key = Q.prefix .. id
  local cur = jget(key, F.state, F.priority, F.children, F.parents, F.runs_on)
  if not cur[1] then
    out[#out + 1] = -1
  elseif not allowed[cur[1]] then
    out[#out + 1] = -3
  else
    rcall('PERSIST', key)
    rcall('HSET', key, F.state, 'submitted', F.attempt, 0, F.stalls, 0, F.begun, '0',
          F.submitted_at_ms, Q.now_s)
    rcall('HDEL', key, F.completed_at_ms, F.result, F.token, F.run_at_ms, F.deadline_ms,
          F.cancel_requested_at_ms, F.progress, F.progress_message, F.rate_slot_ms)
    rcall('ZREM', Q.dlq, id)
    if cur[3] then rcall('PERSIST', cur[3]) end
    local pending, dead = 0, nil
    if cur[4] then pending, dead = attach_parents(Q, id, cjson.decode(cur[4]), cur[5]) end
    if pending > 0 then
      rcall('HSET', key, F.state, 'blocked', F.pending_parents, pending)
      rcall('SADD', Q.blocked, id)
      emit(Q, id, cur[1], 'blocked', 0)
      if dead then fail_child(Q, id, dead[1], dead[2]) end
    else
      make_ready(Q, key, id, cur[2], rcall('INCR', Q.seq))
      emit(Q, id, cur[1], 'submitted', 0)
    end
    out[#out + 1] = 0
  end
end
return out
