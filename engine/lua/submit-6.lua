--[[
  Submit a batch of jobs: each becomes `submitted`, or `scheduled` when it has a future run time.
  A job with `ttl_ms`, `good_until_ms` or `queue_timeout_ms` gets a `deadline_ms` (the earliest)
  and an entry in the deadlines ZSET; past it, a queued job expires.
  KEYS[1] submitted ZSET   KEYS[2] scheduled ZSET   KEYS[3] events STREAM
  KEYS[4] marker ZSET      KEYS[5] seq counter      KEYS[6] deadlines ZSET
  ARGV[1] job key prefix   ARGV[2] events maxlen    ARGV[3] number of jobs
  then one JSON array per job: [id, delay_ms or '', run_at_ms or '', priority, field, value, ...]
  Returns: one code per job: 1 submitted, 2 scheduled, -4 duplicate id (nothing written for it).
  Events: unsubmitted -> submitted | scheduled.
]]
--@include common
local submitted, scheduled, events, marker, seqkey, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, maxlen, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local seq = rcall('INCRBY', seqkey, count) - count
local out = {}
local woke = false
for j = 1, count do
  local spec = cjson.decode(ARGV[3 + j])
  local id, delay, run_at, priority = spec[1], spec[2], spec[3], spec[4]
  local key = prefix .. id
  if rcall('EXISTS', key) == 1 then
    out[j] = -4
  else
    local due = nil
    if delay ~= '' then due = now + tonumber(delay) end
    if run_at ~= '' then due = tonumber(run_at) end
    local state = 'submitted'
    if due and due > now then state = 'scheduled' end
    rcall('HSET', key, 'state', state, 'submitted_at_ms', fmt(now), unpack(spec, 5))
    local limits = rcall('HMGET', key, 'ttl_ms', 'good_until_ms', 'queue_timeout_ms')
    local deadline = nil
    if limits[1] then deadline = now + tonumber(limits[1]) end
    if limits[2] and (not deadline or tonumber(limits[2]) < deadline) then deadline = tonumber(limits[2]) end
    if limits[3] then
      local start = math.max(now, due or now)
      if not deadline or start + tonumber(limits[3]) < deadline then deadline = start + tonumber(limits[3]) end
    end
    if deadline then
      rcall('HSET', key, 'deadline_ms', fmt(deadline))
      rcall('ZADD', deadlines, fmt(deadline), id)
    end
    if state == 'scheduled' then
      rcall('HSET', key, 'run_at_ms', fmt(due))
      rcall('ZADD', scheduled, fmt(due), id)
      out[j] = 2
    else
      rcall('ZADD', submitted, ready_score(priority, seq + j), id)
      woke = true
      out[j] = 1
    end
    emit(events, maxlen, id, 'unsubmitted', state, now, 0)
  end
end
if woke then rcall('ZADD', marker, 0, '0') end
return out
