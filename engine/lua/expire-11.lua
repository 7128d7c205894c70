--[[
  Expire queued jobs (submitted, scheduled, blocked) whose deadline_ms passed before they
  started: `expired`, into the DLQ unless dlq is '0'. Deadline entries of jobs that already
  started or ended are dropped. Safe with any number of cleaners at once.
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   ARGV[4] ttl_ms outside the DLQ
  Returns: the number of jobs expired.
  Events: submitted | scheduled | blocked -> expired.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[4])
local limit = tonumber(ARGV[3])
local ids = rcall('ZRANGEBYSCORE', Q.deadlines, '-inf', Q.now_s, 'LIMIT', 0, limit)
local expired = 0
for _, id in ipairs(ids) do
  local key = Q.prefix .. id
  local cur = jget(key, F.state, F.attempt)
  rcall('ZREM', Q.deadlines, id)
  local from = cur[1]
  if from == 'submitted' or from == 'scheduled' or from == 'blocked' then
    unqueue(Q, id)
    emit(Q, id, from, 'expired', cur[2] or '0', '', 'deadline passed')
    bury(Q, key, id, 'expired')
    expired = expired + 1
  end
end
return expired
