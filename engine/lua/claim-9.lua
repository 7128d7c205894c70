--[[
  Claim up to N ready jobs: each moves from `submitted` to `started` with a lease and a fresh
  token. Claiming is not beginning: the attempt counter moves only in begin-1.lua, so a job whose
  worker dies before it began goes back to `submitted` without using an attempt.
  A job past its deadline_ms is expired instead (into the DLQ unless its dlq field is '0').
  KEYS[1] submitted ZSET   KEYS[2] started ZSET (id -> lease deadline ms)   KEYS[3] events STREAM
  KEYS[4] marker ZSET      KEYS[5] seq counter (tokens)   KEYS[6] dlq ZSET   KEYS[7] done ZSET
  KEYS[8] stats HASH       KEYS[9] meta HASH (a queue with paused = '1' gives nothing)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   ARGV[4] lease_ms
  ARGV[5] worker id        ARGV[6] result ttl ms for expired jobs kept outside the DLQ
  Returns: a list of jobs, each {id, task, version, args, kwargs, attempt it will run as, token,
  options} (options is false when the job has no per-call overrides).
  Ids whose hash is gone or not `submitted` are removed and skipped.
  Events: submitted -> started | expired. Re-adds the marker while jobs remain.
]]
--@include common
local submitted, started, events, marker, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local dlq, done, stats = KEYS[6], KEYS[7], KEYS[8]
local prefix, maxlen, limit, lease_ms, worker = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local ttl_ms = tonumber(ARGV[6])
if rcall('HGET', KEYS[9], 'paused') == '1' then return {} end
local popped = rcall('ZPOPMIN', submitted, limit)
if #popped == 0 then return {} end
local now = now_ms()
local lease = fmt(now + lease_ms)
local token = rcall('INCRBY', seqkey, #popped / 2) - #popped / 2
local out = {}
for j = 1, #popped, 2 do
  local id = popped[j]
  local key = prefix .. id
  token = token + 1
  local f = rcall('HMGET', key, 'state', 'task', 'version', 'args', 'kwargs', 'options', 'attempt', 'deadline_ms')
  if f[1] == 'submitted' then
    local attempt = tonumber(f[7] or '0') + 1
    if f[8] and tonumber(f[8]) <= now then
      bury(key, id, 'expired', now, dlq, done, stats, ttl_ms)
      emit(events, maxlen, id, 'submitted', 'expired', now, attempt - 1, worker, 'deadline passed')
    else
      rcall('HSET', key, 'state', 'started', 'token', fmt(token), 'worker', worker,
            'claimed_at_ms', fmt(now), 'begun', '0')
      rcall('ZADD', started, lease, id)
      emit(events, maxlen, id, 'submitted', 'started', now, attempt, worker)
      out[#out + 1] = {id, f[2], f[3], f[4], f[5], attempt, fmt(token), f[6]}
    end
  end
end
if rcall('ZCARD', submitted) > 0 then rcall('ZADD', marker, 0, '0') end
return out
