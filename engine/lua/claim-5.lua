--[[
  Claim up to N ready jobs: each moves from `submitted` to `started` with a lease and a fresh token.
  KEYS[1] submitted ZSET   KEYS[2] started ZSET (id -> lease deadline ms)   KEYS[3] events STREAM
  KEYS[4] marker ZSET      KEYS[5] seq counter (tokens)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   ARGV[4] lease_ms   ARGV[5] worker id
  Returns: a list of jobs, each {id, task, version, args, kwargs, attempt, token, options}
  (options is false when the job has no per-call overrides).
  Ids whose hash is gone or not `submitted` are removed and skipped.
  Events: submitted -> started. Re-adds the marker while jobs remain, to wake another worker.
]]
--@include common
local submitted, started, events, marker, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, maxlen, limit, lease_ms, worker = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local popped = rcall('ZPOPMIN', submitted, limit)
if #popped == 0 then return {} end
local now = now_ms()
local deadline = fmt(now + lease_ms)
local token = rcall('INCRBY', seqkey, #popped / 2) - #popped / 2
local out = {}
for j = 1, #popped, 2 do
  local id = popped[j]
  local key = prefix .. id
  token = token + 1
  if rcall('HGET', key, 'state') == 'submitted' then
    local attempt = rcall('HINCRBY', key, 'attempt', 1)
    local first = 'started_at_ms'
    if attempt > 1 then first = 'retried_at_ms' end
    rcall('HSET', key, 'state', 'started', 'token', fmt(token), 'worker', worker,
          'claimed_at_ms', fmt(now), first, fmt(now), 'heartbeat_at_ms', fmt(now))
    rcall('ZADD', started, deadline, id)
    emit(events, maxlen, id, 'submitted', 'started', now, attempt, worker)
    local f = rcall('HMGET', key, 'task', 'version', 'args', 'kwargs', 'options')
    out[#out + 1] = {id, f[1], f[2], f[3], f[4], attempt, fmt(token), f[5]}
  end
end
if rcall('ZCARD', submitted) > 0 then rcall('ZADD', marker, 0, '0') end
return out
