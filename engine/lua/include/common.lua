--[[
  Shared helpers, inlined by engine/scripts.py where a script says `--@include common`.
  now_ms(): Redis server time in ms. fmt(n): a number as an exact integer string.
  ready_score(priority, seq): ZSET score of a ready job (higher priority first, then arrival).
  emit(...): append one transition event to the queue's stream.
  append_error(key, err): append one JSON error object to the job's `errors` JSON array.
  bury(...): end a job in a terminal state: into the DLQ (failures, unless the job's `dlq` field
  is '0') or into `done` with an expiry (completed, cancelled, or dlq '0'); counts it in stats.
  owned(key, token, ...): HMGET state, token and more fields; return 0 when the job is started
  and holds `token`, else -1 (not found), -2 (lease lost) or -3 (not started), then the values.
  release(...): put a started job back into `submitted`, at the front of its priority band
  (it was already under way), for reap and hand-back.
]]
local rcall = redis.call

local function now_ms()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%.0f', n)
end

local function ready_score(priority, seq)
  return fmt((100 - tonumber(priority)) * 10000000000000 + seq)
end

local function emit(events, maxlen, id, from, to, at, attempt, worker, err)
  if worker == nil or worker == false then worker = '' end
  if err == nil or err == false then err = '' end
  rcall('XADD', events, 'MAXLEN', '~', maxlen, '*', 'job', id, 'from', from, 'to', to,
        'at', fmt(at), 'attempt', attempt or '0', 'worker', worker, 'error', err)
end

local function append_error(key, err)
  local errors = rcall('HGET', key, 'errors')
  if not errors or errors == '' or errors == '[]' then
    errors = '[' .. err .. ']'
  else
    errors = string.sub(errors, 1, -2) .. ',' .. err .. ']'
  end
  rcall('HSET', key, 'errors', errors)
end

local function bury(key, id, state, now, dlq, done, stats, ttl_ms)
  rcall('HSET', key, 'state', state, 'completed_at_ms', fmt(now))
  rcall('HDEL', key, 'token')
  if state ~= 'cancelled' and state ~= 'completed' and rcall('HGET', key, 'dlq') ~= '0' then
    rcall('ZADD', dlq, fmt(now), id)
  else
    rcall('ZADD', done, fmt(now + ttl_ms), id)
    rcall('PEXPIRE', key, ttl_ms)
  end
  rcall('HINCRBY', stats, state, 1)
end

local function release(key, id, now, submitted, marker)
  local priority = rcall('HGET', key, 'priority') or 0
  rcall('HSET', key, 'state', 'submitted', 'submitted_at_ms', fmt(now), 'begun', '0')
  rcall('HDEL', key, 'token')
  rcall('ZADD', submitted, ready_score(priority, 0), id)
  rcall('ZADD', marker, 0, '0')
end

local function owned(key, token, ...)
  local cur = rcall('HMGET', key, 'state', 'token', ...)
  if not cur[1] then return -1, cur end
  if cur[2] ~= token then return -2, cur end
  if cur[1] ~= 'started' then return -3, cur end
  return 0, cur
end
