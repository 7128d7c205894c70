--[[
  Promote due scheduled jobs to `submitted`, oldest due first, at most N per call.
  KEYS[1] scheduled ZSET   KEYS[2] submitted ZSET   KEYS[3] events STREAM   KEYS[4] marker ZSET
  KEYS[5] seq counter
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs
  Returns: {promoted count, ms until the next scheduled job is due (-1 when none)}.
  Ids whose hash is gone or not `scheduled` are removed. Events: scheduled -> submitted.
]]
--@include common
local scheduled, submitted, events, marker, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, maxlen, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local due = rcall('ZRANGEBYSCORE', scheduled, '-inf', fmt(now), 'LIMIT', 0, limit)
local promoted = 0
if #due > 0 then
  local seq = rcall('INCRBY', seqkey, #due) - #due
  for j, id in ipairs(due) do
    local key = prefix .. id
    local cur = rcall('HMGET', key, 'state', 'priority', 'attempt')
    if cur[1] == 'scheduled' then
      rcall('HSET', key, 'state', 'submitted', 'submitted_at_ms', fmt(now))
      rcall('ZADD', submitted, ready_score(cur[2] or 0, seq + j), id)
      emit(events, maxlen, id, 'scheduled', 'submitted', now, cur[3] or '0')
      promoted = promoted + 1
    end
  end
  rcall('ZREM', scheduled, unpack(due))
  if promoted > 0 then rcall('ZADD', marker, 0, '0') end
end
local nxt = rcall('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
local wait = -1
if #nxt > 0 then wait = math.max(0, tonumber(nxt[2]) - now) end
return {promoted, wait}
