--[[
  Expire queued jobs (submitted, scheduled, blocked) whose deadline_ms passed before they
  started: `expired`, into the DLQ unless dlq is '0'. Deadline entries of jobs that already
  started or ended are dropped. Safe with any number of cleaners at once.
  KEYS[1] deadlines ZSET   KEYS[2] submitted ZSET   KEYS[3] scheduled ZSET   KEYS[4] blocked SET
  KEYS[5] dlq ZSET         KEYS[6] done ZSET        KEYS[7] events STREAM    KEYS[8] stats HASH
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   ARGV[4] ttl_ms outside the DLQ
  Returns: the number of jobs expired.
  Events: submitted | scheduled | blocked -> expired.
]]
--@include common
local deadlines, submitted, scheduled, blocked, dlq, done, events, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local prefix, maxlen, limit, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local ids = rcall('ZRANGEBYSCORE', deadlines, '-inf', fmt(now), 'LIMIT', 0, limit)
local expired = 0
for _, id in ipairs(ids) do
  local key = prefix .. id
  local cur = rcall('HMGET', key, 'state', 'attempt')
  rcall('ZREM', deadlines, id)
  local from = cur[1]
  if from == 'submitted' or from == 'scheduled' or from == 'blocked' then
    rcall('ZREM', submitted, id)
    rcall('ZREM', scheduled, id)
    rcall('SREM', blocked, id)
    bury(key, id, 'expired', now, dlq, done, stats, ttl)
    emit(events, maxlen, id, from, 'expired', now, cur[2] or '0', '', 'deadline passed')
    expired = expired + 1
  end
end
return expired
