--[[
  Shared helpers, inlined by engine/seam/luasrc.py where a script says `--@include common`.
  queue(prefix, maxlen, ttl_ms): Q, the 11 queue keys of keys.QUEUE_KEYS (KEYS[1..11]) by name,
  with the job key prefix, the events maxlen, the ttl of jobs ending outside the DLQ, and the time
  (with_now).
  now_ms(): Redis server time in ms. fmt(n): an integer as its decimal string (a Lua number passed
  to redis.call is written with printf's %.17g, many times slower: pass strings).
  with_now(Q): set Q.now (server time in ms) and Q.now_s (it as text, made once a call); return Q.
  ready_score(priority, seq): ZSET score of a ready job (higher priority first, then arrival).
  emit(...): append one transition event to the queue's stream.
  append_error(key, err): append one JSON error object to the job's `errors` JSON array, and
  set the job's `fingerprint` field to the error's (engine/ops/fingerprint.py; none: field removed).
  script_error(kind, message, attempt, at_ms): the JSON error object of an error a script makes,
  fingerprinted by its type alone (fingerprint_hash(kind) in engine/ops/fingerprint.py).
  make_ready(Q, ...): put a `submitted` job where workers find it: the ready ZSET, or the waiting
  ZSET of its concurrency key while that key is at its limit (keyed = false: it has none);
  stats' waiting_turn counts the jobs waiting so, and `turn|<waiting ZSET key>` those of each
  key (the field is deleted at zero, so the queue page lists the keys in use from the HASH).
  turn(Q, waiting, n): add n to both counts.
  free_slot(Q, key, id): give back the job's concurrency slot (idempotent) and admit the next
  waiting job of its key at the back of its priority band (fair turns between keys).
  finish(Q, key, id): free_slot, and give back its deduplication id (except in throttle mode).
  cleanup_ttl(cleanup, state): the ms a job's `cleanup_ms` field (its task's cleanup_on, JSON
  state -> ms) keeps it in `state`, or nil when it names no such state.
  bury(Q, key, id, state): end a job in a terminal state other than completed (the fields of a
  running job go: token, begun, isolated): a state its cleanup_ms names expires after that
  (0: at once, last of all), else into the DLQ
  (unless the job's `dlq` field is '0'), else the hash and its children SET expire after the
  queue's ttl (Redis deletes them: no index of finished jobs); counts it in stats (the
  state's total, and `done|<task>|<state>`); then
  settles each job waiting for it (fail_child(Q, cid, parent, state, children)): a child whose
  `runs_on` field is 'end', or 'failure' when `state` is failed, stalled, expired or dropped,
  counts the parent off (count_off) and leaves its children SET; a 'failure' child of a
  cancelled parent ends `cancelled` (end_child); any other child gets its on_parent_failure
  ('wait' leaves it blocked, so a resubmitted parent that completes still releases it; 'fail'
  and 'cancel' end it, and in turn its own children).
  verdict(runs_on, state): what a parent ending in `state` does to a child waiting for it:
  'release' (count it off), 'cancel' (a failure callback not needed) or 'policy' (its
  on_parent_failure).
  count_off(Q, ckey, cid, priority, run_at): count one parent off a blocked child; with none
  left it becomes `submitted` (or `scheduled` when its run_at is ahead).
  end_child(Q, ckey, cid, to, kind, msg): end a blocked child `to` (failed, cancelled) for a
  parent's end: its error record (type `kind`), its event, bury.
  unblock_children(Q, children, parent): count a completed parent off each waiting child; a
  'failure' child ends `cancelled` instead (bury, with Q.ttl: the caller sets it).
  unqueue(Q, id): remove a queued job from every queue structure (a job set aside for its task
  version too: its `unserved` ZSET, stats' waiting_version; claim-12.lua).
  attach_parents(Q, id, parents, runs_on): register the job with each parent (ids) that exists
  and is live, or ended in a way its runs_on does not count off (verdict; Q.children: the
  children SET key prefix); return how many, and one of those that already ended as
  {id, state} (or nil): the caller settles the job with it (fail_child).
  forget(key): delete a job's hash and the SET of jobs waiting for it.
  Job hash fields are spelled F.<field> (this script's hash format) and O.<field> (the other's):
  engine/seam/luasrc.py puts the stored names in place (engine/fields.py).
  native(key): turn a job hash stored in the other format into this one (every field renamed,
  in one step); false when the hash is not in the other format (or is gone).
  jget(key, first, ...): HMGET of a job's fields, `first` one every live job has (F.state, or
  F.token for a running one); when it is absent, the hash is made native first, if it was in
  the other format, and read again. Every script reads a job through jget (or owned) first:
  a job written by a process of the other format is read, and kept in this one.
  owned(key, token, ...): HMGET state, token and more fields; return 0 when the job is started
  and holds `token`, else -1 (not found), -2 (lease lost) or -3 (not started), then the values.
  release(Q, key, id): put a started job back into `submitted`, at the front of its priority
  band (it was already under way), for reap and hand-back.
  hand_back(Q, key, id, attempt, begun, worker, reason): release a started job the worker never
  ran, without using an attempt (one the claim began gets its attempt back); Q.started is set.
  stall(Q, key, id, attempt, worker, err, why): count a stall of a begun job whose process died
  (err: JSON error object); past its max_stalls (field, default 1) it ends `stalled` (bury),
  else it goes back to `submitted`. Returns 1 when it ended, 0 when it went back. A job with
  stalls > 0 is a suspect: workers run it alone in a process of its own.
  Metrics (engine/resources/metrics.py reads them), in the queue's stats HASH, bounded by tasks x states x
  buckets: `done|<task>|<state>` jobs that reached a terminal state (bury; complete-11.lua);
  histograms `run` (run time of completed jobs) and `wait` (from ready to begun) as
  `<kind>|<task>|<le_ms>` (one bucket per observation, not cumulative; 'inf' past the last
  bound) and `<kind>|<task>|sum_ms`.
  bounds(arg): the bucket bounds in ms from "5,10,25,..." (ascending), with their labels.
  observe(tally, task, ms, bounds): count one observation of `ms` for `task` into `tally`
  (task -> {bucket index -> count, sum = ms}), in Lua only: a batch script then writes it once
  with add_tally(stats, kind, tally, bounds), one HINCRBY per field touched, not per job.
  add_counts(stats, counts, prefix, suffix): HINCRBY prefix .. key .. suffix by n for each
  key -> n of `counts`.
  put_field(t, name, value): append a field and its value to `t`, the arguments of one HSET.
  many(cmd, key, args): run a variadic command (ZADD, ZREM...) once for a whole batch's `args`
  (in chunks of 1,000, below Lua's unpack limit) instead of once a job.
  begin_fields(t, started_before, now_s, isolated): put the fields that begin a claimed job into
  `t` (begun, its start stamp: started_at_ms, or retried_at_ms when it started before, and
  isolated when '1': release and retry delete it); begin-2.lua writes these, and claim-12.lua
  the same ones in its own HSET (no table a job). No heartbeat_at_ms: a job has one once its
  task heartbeats (heartbeat-1.lua), and a finished job's hash is the smaller by that field for
  its whole result ttl.
]]
local rcall = redis.call

local function now_ms()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%d', n)
end

local function with_now(Q)
  Q.now = now_ms()
  Q.now_s = fmt(Q.now)
  return Q
end

local function queue(prefix, maxlen, ttl_ms)
  return with_now({submitted = KEYS[1], scheduled = KEYS[2], blocked = KEYS[3], started = KEYS[4],
                   dlq = KEYS[5], events = KEYS[6], marker = KEYS[7], seq = KEYS[8], stats = KEYS[9],
                   meta = KEYS[10], deadlines = KEYS[11],
                   prefix = prefix, maxlen = maxlen, ttl = tonumber(ttl_ms or 0)})
end

local function bounds(arg)
  local out = {labels = {}}
  for n in string.gmatch(arg, '%d+') do
    out[#out + 1] = tonumber(n)
    out.labels[#out] = n
  end
  out.n = #out
  out.labels[out.n + 1] = 'inf'
  return out
end

local function observe(tally, task, ms, b)
  if ms < 0 then ms = 0 end
  local t = tally[task]
  if not t then
    t = {sum = 0}
    tally[task] = t
  end
  local i = b.n + 1
  for k = 1, b.n do
    if ms <= b[k] then i = k; break end
  end
  t[i] = (t[i] or 0) + 1
  t.sum = t.sum + ms
end

local function add_tally(stats, kind, tally, b)
  for task, t in pairs(tally) do
    local name = kind .. '|' .. task .. '|'
    for i = 1, b.n + 1 do
      if t[i] then rcall('HINCRBY', stats, name .. b.labels[i], fmt(t[i])) end
    end
    rcall('HINCRBY', stats, name .. 'sum_ms', fmt(t.sum))
  end
end

local function native(key)
  if rcall('HEXISTS', key, O.state) == 0 then return false end
  local rename = F_FROM_O
  local flat = rcall('HGETALL', key)
  local set, gone = {}, {}
  for i = 1, #flat, 2 do
    local name = rename[flat[i]]
    if name then
      set[#set + 1], set[#set + 2] = name, flat[i + 1]
      gone[#gone + 1] = flat[i]
    end
  end
  rcall('HSET', key, unpack(set))
  rcall('HDEL', key, unpack(gone))
  return true
end

local function jget(key, ...)
  local cur = rcall('HMGET', key, ...)
  if not cur[1] and native(key) then cur = rcall('HMGET', key, ...) end
  return cur
end

local function put_field(t, name, value)
  t[#t + 1] = name
  t[#t + 1] = value
end

local function many(cmd, key, args)
  for i = 1, #args, 1000 do
    rcall(cmd, key, unpack(args, i, math.min(i + 999, #args)))
  end
end

local function begin_fields(t, started_before, now_s, isolated)
  put_field(t, F.begun, '1')
  put_field(t, started_before and F.retried_at_ms or F.started_at_ms, now_s)
  if isolated == '1' then put_field(t, F.isolated, '1') end
end

local function add_counts(stats, counts, prefix, suffix)
  for key, n in pairs(counts) do rcall('HINCRBY', stats, prefix .. key .. suffix, fmt(n)) end
end

local function ready_score(priority, seq)
  return fmt((100 - tonumber(priority)) * 10000000000000 + seq)
end

local function emit(Q, id, from, to, attempt, worker, err)
  if worker == nil or worker == false then worker = '' end
  if err == nil or err == false then err = '' end
  if type(attempt) == 'number' then attempt = fmt(attempt) end
  rcall('XADD', Q.events, 'MAXLEN', '~', Q.maxlen, '*', 'job', id, 'from', from, 'to', to,
        'at', Q.now_s, 'attempt', attempt or '0', 'worker', worker, 'error', err)
end

local function append_error(key, err)
  local errors = rcall('HGET', key, F.errors)
  if not errors or errors == '' or errors == '[]' then
    errors = '[' .. err .. ']'
  else
    errors = string.sub(errors, 1, -2) .. ',' .. err .. ']'
  end
  rcall('HSET', key, F.errors, errors)
  -- Top-level key only: a quote inside a JSON string is escaped, so it cannot match there.
  local fp = string.match(err, '"fingerprint":"(%x+)"')
  if fp then rcall('HSET', key, F.fingerprint, fp) else rcall('HDEL', key, F.fingerprint) end
end

local function script_error(kind, message, attempt, at_ms)
  return cjson.encode({type = kind, message = message, attempt = attempt, at_ms = at_ms,
                       fingerprint = string.sub(redis.sha1hex(kind .. '\n\n'), 1, 16),
                       fingerprint_message = '', fingerprint_frame = ''})
end

local function turn(Q, waiting, n)
  rcall('HINCRBY', Q.stats, 'waiting_turn', n)
  if rcall('HINCRBY', Q.stats, 'turn|' .. waiting, n) <= 0 then
    rcall('HDEL', Q.stats, 'turn|' .. waiting)
  end
end

local function make_ready(Q, key, id, priority, seq, keyed)
  local score = ready_score(priority or 0, seq)
  local ck = keyed ~= false and rcall('HMGET', key, F.ckey_active, F.ckey_waiting, F.concurrency_limit)
  if ck and ck[1] then
    if rcall('SISMEMBER', ck[1], id) == 0 and rcall('SCARD', ck[1]) >= tonumber(ck[3]) then
      rcall('ZADD', ck[2], score, id)
      turn(Q, ck[2], 1)
      return false
    end
    rcall('SADD', ck[1], id)
  end
  rcall('ZADD', Q.submitted, score, id)
  rcall('ZADD', Q.marker, '0', '0')
  return true
end

local function free_slot(Q, key, id)
  local f = rcall('HMGET', key, F.ckey_active, F.ckey_waiting, F.concurrency_limit)
  if not f[1] then return end
  if rcall('ZREM', f[2], id) == 1 then turn(Q, f[2], -1) end
  if rcall('SREM', f[1], id) == 0 then return end
  while rcall('SCARD', f[1]) < tonumber(f[3]) do
    local nxt = rcall('ZPOPMIN', f[2])
    if #nxt == 0 then break end
    turn(Q, f[2], -1)
    rcall('SADD', f[1], nxt[1])
    local priority = jget(Q.prefix .. nxt[1], F.state, F.priority)[2] or 0
    rcall('ZADD', Q.submitted, ready_score(priority, rcall('INCR', Q.seq)), nxt[1])
    rcall('ZADD', Q.marker, '0', '0')
  end
end

local function cleanup_ttl(cleanup, state)
  if not cleanup then return nil end
  local ms = cjson.decode(cleanup)[state]
  if ms == nil then return nil end
  return math.floor(ms)
end

local function finish(Q, key, id)
  local f = rcall('HMGET', key, F.dedup_key, F.dedup_mode)
  if f[1] and f[2] ~= 'throttle' and rcall('GET', f[1]) == id then rcall('DEL', f[1]) end
  free_slot(Q, key, id)
end

local function unqueue(Q, id)
  local aside = rcall('HGET', Q.prefix .. id, F.unserved)
  if aside then
    if rcall('ZREM', aside, id) == 1 then rcall('HINCRBY', Q.stats, 'waiting_version', -1) end
    rcall('HDEL', Q.prefix .. id, F.unserved, F.unserved_at_ms)
  end
  rcall('ZREM', Q.submitted, id)
  rcall('ZREM', Q.scheduled, id)
  rcall('SREM', Q.blocked, id)
  rcall('ZREM', Q.deadlines, id)
end

local bury

-- States a job ends in without completing.
local DEAD = {failed = true, cancelled = true, stalled = true, dropped = true, expired = true}

-- Ends a failure callback runs on (a parent that completes or is cancelled cancels it).
local FAILED_END = {failed = true, stalled = true, expired = true, dropped = true}

local function verdict(runs_on, state)
  if runs_on == 'end' then return 'release' end
  if runs_on == 'failure' then
    if FAILED_END[state] then return 'release' end
    return 'cancel'
  end
  if state == 'completed' then return 'release' end
  return 'policy'
end

local function attach_parents(Q, id, parents, runs_on)
  local pending, dead = 0, nil
  for _, parent in ipairs(parents) do
    local pkey = Q.prefix .. parent
    local pstate = jget(pkey, F.state)[1]
    local ended = pstate == 'completed' or DEAD[pstate]
    if pstate and not (ended and verdict(runs_on, pstate) == 'release') then
      pending = pending + 1
      local children = Q.children .. parent
      rcall('SADD', children, id)
      rcall('HSET', pkey, F.children, children)
      if ended then
        dead = {parent, pstate}
        local ttl = rcall('PTTL', pkey)  -- ended outside the DLQ: the SET goes with the parent
        if ttl > 0 then rcall('PEXPIRE', children, ttl) end
      end
    end
  end
  return pending, dead
end

local function count_off(Q, ckey, cid, priority, run_at)
  if rcall('HINCRBY', ckey, F.pending_parents, -1) > 0 then return end
  rcall('SREM', Q.blocked, cid)
  if run_at and tonumber(run_at) > Q.now then
    rcall('HSET', ckey, F.state, 'scheduled')
    rcall('ZADD', Q.scheduled, run_at, cid)
    emit(Q, cid, 'blocked', 'scheduled', 0)
  else
    rcall('HSET', ckey, F.state, 'submitted', F.submitted_at_ms, Q.now_s)
    make_ready(Q, ckey, cid, priority, rcall('INCR', Q.seq))
    emit(Q, cid, 'blocked', 'submitted', 0)
  end
end

local function end_child(Q, ckey, cid, to, kind, msg)
  unqueue(Q, cid)
  append_error(ckey, script_error(kind, msg, 0, Q.now))
  emit(Q, cid, 'blocked', to, 0, '', msg)
  bury(Q, ckey, cid, to)
end

local function not_needed(parent, state)
  local ended = 'ended ' .. state
  if state == 'completed' then ended = 'completed' end
  return 'parent ' .. parent .. ' ' .. ended .. ': failure callback not needed'
end

local function fail_child(Q, cid, parent, state, children)
  local ckey = Q.prefix .. cid
  local c = jget(ckey, F.state, F.on_parent_failure, F.runs_on, F.priority, F.run_at_ms)
  if c[1] ~= 'blocked' then return end
  local v = verdict(c[3], state)
  if v == 'release' then
    if children then rcall('SREM', children, cid) end  -- counted once, even if resubmitted
    count_off(Q, ckey, cid, c[4], c[5])
  elseif v == 'cancel' then
    end_child(Q, ckey, cid, 'cancelled', 'ParentDidNotFail', not_needed(parent, state))
  elseif c[2] == 'fail' or c[2] == 'cancel' then
    local to = 'failed'
    if c[2] == 'cancel' then to = 'cancelled' end
    end_child(Q, ckey, cid, to, 'ParentFailed', 'parent ' .. parent .. ' ended ' .. state)
  end
end

bury = function(Q, key, id, state)
  rcall('HSET', key, F.state, state, F.completed_at_ms, Q.now_s)
  rcall('HDEL', key, F.token, F.begun, F.isolated)
  local f = rcall('HMGET', key, F.dlq, F.children, F.task, F.deadline_ms, F.cleanup_ms)
  if f[4] then rcall('ZREM', Q.deadlines, id) end
  local kept = cleanup_ttl(f[5], state)
  local ttl = nil
  if kept then
    ttl = kept
  elseif state ~= 'cancelled' and f[1] ~= '0' then
    rcall('ZADD', Q.dlq, Q.now_s, id)
  else
    ttl = Q.ttl
  end
  rcall('HINCRBY', Q.stats, state, '1')
  rcall('HINCRBY', Q.stats, 'done|' .. (f[3] or '') .. '|' .. state, '1')
  finish(Q, key, id)
  if f[2] then
    for _, cid in ipairs(rcall('SMEMBERS', f[2])) do fail_child(Q, cid, id, state, f[2]) end
  end
  if ttl then  -- last: a ttl of 0 deletes at once
    rcall('PEXPIRE', key, ttl)
    if f[2] then rcall('PEXPIRE', f[2], ttl) end
  end
end

local function unblock_children(Q, children, parent)
  for _, cid in ipairs(rcall('SMEMBERS', children)) do
    local ckey = Q.prefix .. cid
    local c = jget(ckey, F.state, F.priority, F.run_at_ms, F.runs_on)
    if c[1] == 'blocked' then
      if c[4] == 'failure' then
        end_child(Q, ckey, cid, 'cancelled', 'ParentDidNotFail', not_needed(parent, 'completed'))
      else
        count_off(Q, ckey, cid, c[2], c[3])
      end
    end
  end
  rcall('DEL', children)
end

-- A job left `started`: under the queue's max_running (meta), a worker whose claim found the
-- queue full sleeps; wake one when jobs wait.
local function wake_if_capped(Q)
  if rcall('HEXISTS', Q.meta, 'max_running') == 1 and rcall('ZCARD', Q.submitted) > 0 then
    rcall('ZADD', Q.marker, '0', '0')
  end
end

local function release(Q, key, id)
  local priority = rcall('HGET', key, F.priority) or 0
  rcall('HSET', key, F.state, 'submitted', F.submitted_at_ms, Q.now_s, F.begun, '0')
  rcall('HDEL', key, F.token, F.isolated)
  rcall('ZADD', Q.submitted, ready_score(priority, 0), id)
  rcall('ZADD', Q.marker, '0', '0')
end

local function hand_back(Q, key, id, attempt, begun, worker, reason)
  attempt = tonumber(attempt or '0')
  if begun == '1' then attempt = rcall('HINCRBY', key, F.attempt, -1) end
  rcall('ZREM', Q.started, id)
  release(Q, key, id)
  emit(Q, id, 'started', 'submitted', attempt, worker, reason)
end

local function forget(key)
  local children = rcall('HGET', key, F.children)
  if children then rcall('DEL', children) end
  rcall('DEL', key)
end

local function owned(key, token, ...)
  local cur = rcall('HMGET', key, F.state, F.token, ...)  -- jget, inline: every completion
  if not cur[1] and native(key) then cur = rcall('HMGET', key, F.state, F.token, ...) end
  if not cur[1] then return -1, cur end
  if cur[2] ~= token then return -2, cur end
  if cur[1] ~= 'started' then return -3, cur end
  return 0, cur
end

local function stall(Q, key, id, attempt, worker, err, why)
  local stalls = rcall('HINCRBY', key, F.stalls, 1)
  append_error(key, err)
  rcall('ZREM', Q.started, id)
  if stalls > tonumber(rcall('HGET', key, F.max_stalls) or '1') then
    emit(Q, id, 'started', 'stalled', attempt, worker, why .. '; max_stalls reached')
    bury(Q, key, id, 'stalled')
    return 1
  end
  release(Q, key, id)
  emit(Q, id, 'started', 'submitted', attempt, worker, why .. '; recovered')
  return 0
end
