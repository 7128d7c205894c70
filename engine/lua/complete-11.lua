--[[
  Complete a batch of started jobs, each fenced by its lease token. Jobs waiting for a completed
  job are counted off; those with no unfinished parent left become ready; one that runs only
  on a parent's failure (runs_on 'failure') ends `cancelled` instead, its hash kept for the
  parent's result_ttl_ms (common.lua's unblock_children). Counts each in stats
  (`completed`, `done|<task>|completed`) and observes its run time (from the start of its
  attempt) in the `run` histogram (common.lua's observe). The hash expires after
  result_ttl_ms, or its cleanup_ms for `completed` (cleanup_ttl; 0: at once, after everything
  else read it) (Redis deletes it: nothing indexes finished jobs); the SET of the jobs that
  waited for it goes at once, and so does its deadlines entry. The fields of a running job go
  (token, begun, isolated), and so does its checkpoint (the result is the truth now); a null
  result writes no `result` field (readers take null).
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] number of jobs
  ARGV[5] histogram bucket bounds in ms ("5,10,...")
  then per job: id, token, result JSON, result_ttl_ms
  Returns: one code per job: 0 completed, -1 not found, -2 lease lost (token differs), -3 not started.
  Events: started -> completed; blocked -> submitted | scheduled for released children;
  blocked -> cancelled for failure callbacks not needed.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2])
local worker, count = ARGV[3], tonumber(ARGV[4])
local b = bounds(ARGV[5])
local now = Q.now
local out = {}
-- task -> jobs completed, and the run time histogram, written once after the loop.
local done, run = {}, {}
-- ids completed: one ZREM from `started` after the loop.
local ended = {}
for j = 1, count do
  local i = 6 + (j - 1) * 4
  local id, token, result, ttl = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local key = Q.prefix .. id
  local code, cur = owned(key, token, F.attempt, F.children, F.ckey_active, F.dedup_key, F.task,
                          F.started_at_ms, F.retried_at_ms, F.deadline_ms, F.cleanup_ms)
  if code ~= 0 then
    out[j] = code
  else
    if result == 'null' then  -- the default: no field
      rcall('HSET', key, F.state, 'completed', F.completed_at_ms, Q.now_s)
    else
      rcall('HSET', key, F.state, 'completed', F.result, result, F.completed_at_ms, Q.now_s)
    end
    rcall('HDEL', key, F.token, F.begun, F.isolated, F.checkpoint)
    ended[#ended + 1] = id
    if cur[10] then rcall('ZREM', Q.deadlines, id) end
    local task = cur[7] or ''
    done[task] = (done[task] or 0) + 1
    local began = tonumber(cur[9] or cur[8] or '')
    if began then observe(run, task, now - began, b) end
    emit(Q, id, 'started', 'completed', cur[3], worker)
    if cur[5] or cur[6] then finish(Q, key, id) end
    if cur[4] then
      Q.ttl = tonumber(ttl)  -- a cancelled failure callback is kept as long as its parent
      unblock_children(Q, cur[4], id)
    end
    rcall('PEXPIRE', key, cleanup_ttl(cur[11], 'completed') or ttl)
    out[j] = 0
  end
end
many('ZREM', Q.started, ended)
if #ended > 0 then wake_if_capped(Q) end
add_counts(Q.stats, done, 'done|', '|completed')
add_tally(Q.stats, 'run', run, b)
local total = 0
for _, n in pairs(done) do total = total + n end
if total > 0 then rcall('HINCRBY', Q.stats, 'completed', fmt(total)) end
return out
