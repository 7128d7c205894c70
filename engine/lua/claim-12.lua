--[[
  Claim up to N ready jobs: each moves from `submitted` to `started` with a lease and a fresh
  token. Claiming is not beginning: the attempt counter moves only when a job begins, so a job
  whose worker dies before it began goes back to `submitted` without using an attempt. A job
  the worker starts at once is begun here, in the same step, as begin-2.lua would (attempt,
  start stamps, queue wait); one it may hold back (a suspect, a job with options of its own, a
  task in the `held` list: capped by max_concurrent) is only claimed, and begin-2.lua begins it
  when it starts.
  A job past its deadline_ms is expired instead (into the DLQ unless its dlq field is '0'); so
  is a job with no queue_timeout_ms of its own that has been ready for the worker's queue
  timeout (ARGV[11]: QUEUE_TIMEOUT where the worker runs, for a job whose producer stamped none),
  counted from submitted_at_ms, when it last became ready.
  The queue's meta `max_running`, when set, caps its started jobs across every worker: a claim
  takes at most the places left, none when it is full (complete-11, fail-11, retry-11 and
  reap-11 wake a worker as a place frees while jobs wait).
  Rate limits (the queue's meta rate_interval_ms, the job's rate_interval_ms for its task) are
  kept as theoretical arrival times in meta (`tat`, `tat:<task>`), or for a job with a rate key
  in the STRING its rate_budget field names (include/rate_limits.lua): a job whose slot is ahead
  is not started but `scheduled` at its slot, which it keeps (rate_slot_ms), so it waits only
  once; a job whose on_rate_limit is 'drop' and that never ran (no attempt yet) ends
  `cancelled` instead (error RateLimited, 'rate limited'), taking no slot. A job that holds its
  slot (rate_slot_ms, from here or from submit-13.lua) is not limited again.
  Task versions (rolling deploys): a worker names the SET of the `task@version`s it runs (its
  build, keys.QueueKeys.build). A ready job whose task@version is not in it is not claimed but
  set aside, unserved: into the ZSET `<unserved prefix><task>@<version>` (same score, so its
  order is kept), its task@version into the unserved SET, its hash fields `unserved` (that
  ZSET's key) and `unserved_at_ms` set, stats' `waiting_version` counting it; its state stays
  `submitted`. A worker whose build has a version of the unserved SET takes those jobs first.
  Each task@version is looked up once a call; with no build named, or its SET gone (it expires
  unless renewed), every job is claimed (the runner drops what it lacks, as before versions).
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS; meta paused = '1' gives nothing, and so does
  meta `stop:<worker id>`: that worker is stopping, and a claim it queued earlier claims nothing)
  KEYS[12] the unserved SET (task@version of the jobs set aside)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   ARGV[4] lease_ms
  ARGV[5] worker id        ARGV[6] result ttl ms for expired jobs kept outside the DLQ
  ARGV[7] most suspects (stalls > 0) to take, or -1 for any: the rest stay where they were
  ARGV[8] begin: the histogram bucket bounds in ms ("5,10,...") to begin jobs here, or ''
  ARGV[9] the worker's build SET key, or '' (it runs every version)
  ARGV[10] unserved ZSET key prefix (keys.QueueKeys.unserved_prefix)
  ARGV[11] the worker's queue timeout in ms for jobs without one of their own, or '' (none)
  ARGV[12..] held: tasks whose jobs are only claimed
  Returns: the claimed jobs' rows one after another in one flat list, 13 values each: id, task,
  version, args, kwargs, attempt it will run as, token, options, parents, stalls, trace_context,
  begun, checkpoint (engine/seam/scripts.py claimed() splits them; options, parents, trace_context
  and checkpoint are false when the job has none; stalls > 0 marks a suspect, which the worker
  runs alone; begun is 1 when this call began the job, else 0; checkpoint is the state an
  earlier attempt saved, checkpoint-1.lua).
  Ids whose hash is gone or not `submitted` are removed and skipped.
  claimed_at_ms is written only for a job claimed and not begun: one begun here was claimed at
  its start stamp, which readers take instead (engine/job.py claimed_ms), so a finished job's
  hash is the smaller by that field for its whole result ttl.
  Events: submitted -> started | expired ('deadline passed', or 'queue timeout passed' for the
  worker's own) | scheduled ('rate limited') | cancelled ('rate limited': dropped);
  none when set aside.
  Re-adds the marker while jobs remain.
]]
--@include common
--@include rate_limits
local Q = queue(ARGV[1], ARGV[2], ARGV[6])
local limit, lease_ms, worker = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local meta = rcall('HMGET', Q.meta, 'paused', 'rate_interval_ms', 'stop:' .. worker, 'max_running')
if meta[1] == '1' or meta[3] then return {} end
if meta[4] then  -- the queue's cap on running jobs, all workers together
  local room = tonumber(meta[4]) - rcall('ZCARD', Q.started)
  if room <= 0 then return {} end  -- full: the script that frees a place wakes a worker
  limit = math.min(limit, room)
end
local suspects_left = tonumber(ARGV[7])
local own_wait_ms = tonumber(ARGV[11])  -- nil: the worker sets no queue timeout
local unserved, uprefix = KEYS[12], ARGV[10]
local build = ARGV[9] ~= '' and rcall('EXISTS', ARGV[9]) == 1 and ARGV[9] or nil
local runs = {}  -- task@version -> true when this worker's build has it
local function can_run(tv)
  if not build then return true end
  if runs[tv] == nil then runs[tv] = rcall('SISMEMBER', build, tv) == 1 end
  return runs[tv]
end
-- Jobs set aside for a version this worker has come first (they waited for such a worker).
local popped = {}
local from_unserved = {}
if build and rcall('SCARD', unserved) > 0 then
  for _, tv in ipairs(rcall('SMEMBERS', unserved)) do
    local want = limit - #popped / 2
    if want <= 0 then break end
    if can_run(tv) then
      local zkey = uprefix .. tv
      local got = rcall('ZPOPMIN', zkey, want)
      for i = 1, #got, 2 do
        popped[#popped + 1], popped[#popped + 2] = got[i], got[i + 1]
        from_unserved[got[i]] = true
      end
      if #got > 0 then rcall('HINCRBY', Q.stats, 'waiting_version', -#got / 2) end
      if rcall('EXISTS', zkey) == 0 then rcall('SREM', unserved, tv) end
    end
  end
end
if #popped / 2 < limit then
  local got = rcall('ZPOPMIN', Q.submitted, fmt(limit - #popped / 2))
  for i = 1, #got do popped[#popped + 1] = got[i] end
end
if #popped == 0 then return {} end
local now = Q.now
local queue_interval = tonumber(meta[2])
local lease = fmt(now + lease_ms)
local token = rcall('INCRBY', Q.seq, fmt(#popped / 2)) - #popped / 2
local out = {}
local b = ARGV[8] ~= '' and bounds(ARGV[8]) or nil
local held = {}
for i = 12, #ARGV do held[ARGV[i]] = true end
-- task -> the queue wait of each job begun here (as begin-2.lua observes it).
local wait = {}
-- lease, id pairs of the jobs claimed: one ZADD to `started` after the loop.
local leased = {}
local now_s = Q.now_s
local set_aside = false  -- a worker with that version may be waiting: wake one

-- A job's fields, read by HMGET when its hash has many (a small one is read whole, HGETALL:
-- cheaper than looking up each absent field; a large one may hold big errors or logs).
local READ = {F.state, F.task, F.version, F.args, F.kwargs, F.options, F.attempt,
              F.deadline_ms, F.rate_interval_ms, F.rate_slot_ms, F.parents, F.stalls,
              F.trace_context, F.started_at_ms, F.submitted_at_ms, F.claimed_at_ms,
              F.queue_timeout_ms, F.checkpoint, F.rate_budget, F.on_rate_limit}
for j = 1, #popped, 2 do
  local id = popped[j]
  local key = Q.prefix .. id
  token = token + 1
  local f
  for _ = 1, 2 do  -- jget, inline: every claimed job (a hash of the other format, read again)
    f = {}  -- field name -> value
    if rcall('HLEN', key) <= 12 then
      local flat = rcall('HGETALL', key)
      for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
    else
      local got = rcall('HMGET', key, unpack(READ))
      for i = 1, #READ do f[READ[i]] = got[i] or nil end
    end
    if f[F.state] or not native(key) then break end
  end
  local state, task, stalls = f[F.state], f[F.task], f[F.stalls]
  local suspect = stalls ~= nil and tonumber(stalls) > 0
  -- A job without a task name no worker could ever run: claimed, and the runner drops it.
  local tv = task and (task .. '@' .. (f[F.version] or '1'))
  if from_unserved[id] then rcall('HDEL', key, F.unserved, F.unserved_at_ms) end
  if state == 'submitted' and tv and not can_run(tv) then
    rcall('ZADD', uprefix .. tv, popped[j + 1], id)
    rcall('SADD', unserved, tv)
    rcall('HSET', key, F.unserved, uprefix .. tv, F.unserved_at_ms, now_s)
    rcall('HINCRBY', Q.stats, 'waiting_version', 1)
    set_aside = true
  elseif state == 'submitted' and suspect and suspects_left == 0 then
    rcall('ZADD', Q.submitted, popped[j + 1], id)  -- for a worker with a free isolation child
  elseif state == 'submitted' then
    if suspect then suspects_left = suspects_left - 1 end
    local attempt = f[F.attempt] and tonumber(f[F.attempt]) + 1 or 1
    local task_interval = tonumber(f[F.rate_interval_ms])
    local deadline, rate_slot = f[F.deadline_ms], f[F.rate_slot_ms]
    local submitted_at = f[F.submitted_at_ms]
    local expired = deadline and tonumber(deadline) <= now
    local reason = 'deadline passed'
    if not expired and own_wait_ms and not f[F.queue_timeout_ms] and submitted_at
       and now - tonumber(submitted_at) >= own_wait_ms then
      expired, reason = true, 'queue timeout passed'
    end
    local slot, dropped = now, false
    if not expired and (queue_interval or task_interval)
       and not (rate_slot and tonumber(rate_slot) <= now) then
      local lims = limiters(queue_interval, task, task_interval, f[F.rate_budget])
      slot = next_slot(Q, lims, now)
      dropped = slot > now and f[F.on_rate_limit] == 'drop' and attempt == 1
      if not dropped then take_slot(Q, lims, slot) end
    end
    if expired then
      bury(Q, key, id, 'expired')
      emit(Q, id, 'submitted', 'expired', attempt - 1, worker, reason)
    elseif dropped then
      append_error(key, script_error('RateLimited', 'rate limited', 0, now))
      emit(Q, id, 'submitted', 'cancelled', 0, worker, 'rate limited')
      bury(Q, key, id, 'cancelled')
    elseif slot > now then
      rcall('HSET', key, F.state, 'scheduled', F.run_at_ms, fmt(slot), F.rate_slot_ms, fmt(slot))
      rcall('ZADD', Q.scheduled, fmt(slot), id)
      free_slot(Q, key, id)
      emit(Q, id, 'submitted', 'scheduled', attempt - 1, worker, 'rate limited')
    else
      local token_s, attempt_s = fmt(token), fmt(attempt)
      local options = f[F.options]
      local begun = b and not suspect and not options and not held[task]
      if begun then
        local started_before = f[F.started_at_ms]
        rcall('HSET', key, F.state, 'started', F.token, token_s, F.worker, worker,  -- begin_fields
              F.attempt, attempt_s, F.begun, '1',
              started_before and F.retried_at_ms or F.started_at_ms, now_s)
        if submitted_at then observe(wait, task or '', now - tonumber(submitted_at), b) end
      else
        rcall('HSET', key, F.state, 'started', F.token, token_s, F.worker, worker,
              F.begun, '0', F.claimed_at_ms, now_s)
      end
      if rate_slot then rcall('HDEL', key, F.rate_slot_ms) end
      -- an earlier claim's
      if begun and f[F.claimed_at_ms] then rcall('HDEL', key, F.claimed_at_ms) end
      leased[#leased + 1], leased[#leased + 2] = lease, id
      emit(Q, id, 'submitted', 'started', attempt_s, worker)
      local n = #out  -- its row, flat in the reply (no table a job)
      out[n + 1], out[n + 2], out[n + 3] = id, task or false, f[F.version] or false
      out[n + 4], out[n + 5], out[n + 6] = f[F.args] or false, f[F.kwargs] or false, attempt
      out[n + 7], out[n + 8], out[n + 9] = token_s, options or false, f[F.parents] or false
      out[n + 10], out[n + 11] = stalls or '0', f[F.trace_context] or false
      out[n + 12], out[n + 13] = begun and 1 or 0, f[F.checkpoint] or false
    end
  end
end
many('ZADD', Q.started, leased)
if b then add_tally(Q.stats, 'wait', wait, b) end
if set_aside or rcall('ZCARD', Q.submitted) > 0 then rcall('ZADD', Q.marker, '0', '0') end
return out
