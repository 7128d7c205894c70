--[[
  Submit a batch of jobs: each becomes `submitted`, `scheduled` (a future run time) or `blocked`
  (parents not completed yet). Parents must exist in the queue or come earlier in the batch
  (the client orders a flow parents first); the batch is checked before anything is written.
  A child of a batch job that was deduplicated waits for the job holding the dedup id instead.
  A job with `ttl_ms`, `good_until_ms` or `queue_timeout_ms` gets a `deadline_ms` (the earliest)
  and an entry in the deadlines ZSET; past it, a queued job expires (include/deadlines.lua).
  Deduplication by a dedup key naming the job that holds it: simple ignores the new job while
  the holder is not finished; throttle ignores it while the key lives (its ttl); debounce
  replaces a holder that still waits (it ends `cancelled`), else the new job takes the key
  (include/deduplication.lua).
  A job whose on_rate_limit is 'drop' or 'reschedule' and that is due now takes its start slot
  here, on the queue's limiter and its own (its rate key's, else its task's;
  include/rate_limits.lua), and keeps it (rate_slot_ms: the claim does not limit it again).
  With no free slot, 'drop' writes the job ended `cancelled` (error RateLimited, 'rate limited')
  and takes no slot; 'reschedule' writes it `scheduled` at its slot. A job with a delay, a run
  time or parents takes its slot when it is claimed (claim-12.lua).
  A repeatable tick is written only while the repeatable's next tick is still `due` (so one job
  per tick, whatever the number of schedulers), which then moves to `next` (-1: no more ticks)
  (include/repeat_ticks.lua).
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)   KEYS[12] repeat_due ZSET   KEYS[13] repeat_last HASH
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] ttl ms of replaced (debounced) jobs
  ARGV[4] atomic: '1' when a duplicate id refuses the whole batch (a flow)
  ARGV[5] children SET key prefix   ARGV[6] number of jobs
  then one JSON array per job: [id, delay_ms or '', run_at_ms or '', priority, extras, field,
  value, ...]; extras: {parents = [id, ...], runs_on = 'failure' | 'end' (its parents' end that
  releases it; absent: success), keyed = bool, rate = [on_rate_limit, interval ms, its rate
  key's STRING or ''] (a job deciding its rate limit here), limits = bool (a ttl_ms, good_until_ms
  or queue_timeout_ms field: the job gets a deadline),
  dedup = [key, mode, ttl_ms], ['repeat'] = [name, due_ms, next_ms, skip_if_running, limit],
  ride = name (a scheduled flow's other jobs: skipped with the tick an earlier job took),
  last_of = name (a run made by hand: the job becomes repeatable `name`'s last run, no tick taken)}.
  Returns: a flat list: the queue's sequence before this batch (0: its first batch since its keys
  were made, so the client registers the queue), then per job an outcome, an id, a state and a
  time ('' unless rate limited). Outcomes: 'submitted' | 'scheduled' |
  'blocked' | 'failed' | 'cancelled' (created, with that state; failed and cancelled when a
  parent already failed and the job's on_parent_failure says so, cancelled too for a job with
  runs_on 'failure' whose parent already completed or was cancelled), 'deduplicated' (id and state
  of the job that holds the dedup key; '' when its hash is gone),
  'skipped' (the repeatable's previous job still runs), 'stale' (another scheduler took the tick),
  'rate_limited' (no free slot: state 'cancelled', dropped, or 'scheduled', rescheduled; the
  time is the next free slot), -4 duplicate id. A refused batch returns only
  {-5, unknown parent id} or {-4, duplicate id}.
  Events: unsubmitted -> submitted | scheduled | blocked | cancelled ('rate limited');
  blocked -> failed | cancelled;
  scheduled | submitted | blocked -> cancelled for a debounced job.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[3])
Q.children = ARGV[5]
local repeat_due, repeat_last = KEYS[12], KEYS[13]
local atomic, count = ARGV[4] == '1', tonumber(ARGV[6])
local specs, batch = {}, {}
-- An empty list to read (never written): a job without parents allocates none.
local NONE = {}
-- Whether a job of the batch has parents, limits, a dedup id, a repeatable's tick or decides
-- its rate limit here.
local rare = false
for j = 1, count do
  specs[j] = cjson.decode(ARGV[6 + j])
  batch[specs[j][1]] = true
  local x = specs[j][5]
  rare = rare or x.parents ~= nil or x.limits ~= nil or x.dedup ~= nil or x['repeat'] ~= nil
    or x.rate ~= nil
end
-- The helpers only those jobs call (parents, deadlines, ticks, dedup ids, rate slots), made
-- by with_rare() for a batch that has one: each is a closure made again on every call, work a
-- plain job does not need (docs/benchmarks.md).
local R = {}
local function with_rare()
--@include common
--@include deduplication
--@include repeat_ticks
--@include deadlines
--@include rate_limits
  R.take, R.record, R.dedup, R.hold, R.fail = take_tick, record_tick, deduplicate, hold_dedup, fail_child
  R.attach, R.deadline, R.slot = attach_parents, deadline_of, slot_at_submit
  R.drop = function(key, id)  -- end a job rate limited at submit (its hash is written)
    append_error(key, script_error('RateLimited', 'rate limited', 0, Q.now))
    emit(Q, id, 'unsubmitted', 'cancelled', '0', '', 'rate limited')
    bury(Q, key, id, 'cancelled')
  end
end
if rare then with_rare() end
for j = 1, count do
  for _, parent in ipairs(specs[j][5].parents or NONE) do
    if not batch[parent] and rcall('EXISTS', Q.prefix .. parent) == 0 then
      return {-5, parent}
    end
  end
  if atomic and rcall('EXISTS', Q.prefix .. specs[j][1]) == 1 then return {-4, specs[j][1]} end
end
local now = Q.now
-- A deduplicated job of this batch stands for the job holding its dedup id (for its children).
local alias = {}
-- Repeatable name -> what taking its tick gave (false: taken), for the jobs that ride it.
local taken = {}
local seq = rcall('INCRBY', Q.seq, ARGV[6]) - count
local out = {seq}

for j = 1, count do
  local spec = specs[j]
  local id, delay, run_at, priority, x = spec[1], spec[2], spec[3], spec[4], spec[5]
  local key = Q.prefix .. id
  local skip, owner, held = nil, id, ''
  if x['repeat'] then
    skip = R.take(Q, repeat_due, repeat_last, x['repeat'])
    taken[x['repeat'][1]] = skip or false
  end
  if x.ride and taken[x.ride] then skip = taken[x.ride] end
  if not skip and rcall('EXISTS', key) == 1 then skip = -4 end
  if not skip and x.dedup then skip, owner, held = R.dedup(Q, id, x.dedup) end
  if skip then
    if skip == 'deduplicated' then alias[id] = owner end
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = skip, owner or id, held or '', ''
  else
    local due = nil
    if delay ~= '' then due = now + tonumber(delay) end
    if run_at ~= '' then due = tonumber(run_at) end
    local parents, renamed, pending, dead = NONE, false, 0, nil
    if x.parents then
      parents = {}
      for i, parent in ipairs(x.parents) do
        parents[i] = alias[parent] or parent
        renamed = renamed or parents[i] ~= parent
      end
      pending, dead = R.attach(Q, id, parents, x.runs_on)
    end
    local state = 'submitted'
    if pending > 0 then
      state = 'blocked'
    elseif due and due > now then
      state = 'scheduled'
    end
    -- A job deciding its rate limit here (due now): its slot; dropped, or rescheduled to it.
    local slot, dropped = nil, false
    if x.rate and state == 'submitted' then
      slot, dropped = R.slot(Q, spec[7], x.rate)  -- spec[6], spec[7]: the task field, its name
      if dropped then
        state = 'cancelled'
      elseif slot > now then
        state, due = 'scheduled', slot
      end
    end
    local deadline = x.limits and not dropped and R.deadline(Q, spec, due)
    -- One HSET: the client's fields, then this script's (a field named twice: the last wins).
    local f = {unpack(spec, 6)}
    put_field(f, F.submitted_at_ms, Q.now_s)
    put_field(f, F.state, state)
    if slot and not dropped then put_field(f, F.rate_slot_ms, fmt(slot)) end
    if renamed then put_field(f, F.parents, cjson.encode(parents)) end
    if due then put_field(f, F.run_at_ms, fmt(due)) end
    if pending > 0 then put_field(f, F.pending_parents, fmt(pending)) end
    if deadline then put_field(f, F.deadline_ms, fmt(deadline)) end
    rcall('HSET', key, unpack(f))
    if deadline then rcall('ZADD', Q.deadlines, fmt(deadline), id) end
    if dropped then
      R.drop(key, id)
    elseif state == 'blocked' then
      rcall('SADD', Q.blocked, id)
    elseif state == 'scheduled' then
      rcall('ZADD', Q.scheduled, fmt(due), id)
    else
      make_ready(Q, key, id, priority, seq + j, x.keyed == true)
    end
    if not dropped then emit(Q, id, 'unsubmitted', state, '0') end
    if x.dedup and not dropped then R.hold(x.dedup, id) end
    if x['repeat'] then R.record(repeat_due, repeat_last, x['repeat'], id) end
    if x.last_of then rcall('HSET', repeat_last, x.last_of, id) end
    if dead then
      R.fail(Q, id, dead[1], dead[2])
      state = rcall('HGET', key, F.state)
    end
    local outcome, at = state, ''
    if slot and slot > now then outcome, at = 'rate_limited', fmt(slot) end
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = outcome, id, state, at
  end
end
return out
