--[[
  Promote due scheduled jobs to `submitted`, oldest due first, at most N per call.
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs
  Returns: {promoted count, ms until the next scheduled job is due (-1 when none)}.
  Ids whose hash is gone or not `scheduled` are removed. Events: scheduled -> submitted.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2])
local limit = tonumber(ARGV[3])
local now = Q.now
local due = rcall('ZRANGEBYSCORE', Q.scheduled, '-inf', fmt(now), 'LIMIT', 0, limit)
local promoted = 0
if #due > 0 then
  local seq = rcall('INCRBY', Q.seq, #due) - #due
  for j, id in ipairs(due) do
    local key = Q.prefix .. id
    local cur = rcall('HMGET', key, 'state', 'priority', 'attempt')
    if cur[1] == 'scheduled' then
      rcall('HSET', key, 'state', 'submitted', 'submitted_at_ms', fmt(now))
      make_ready(Q, key, id, cur[2], seq + j)
      emit(Q, id, 'scheduled', 'submitted', cur[3] or '0')
      promoted = promoted + 1
    end
  end
  rcall('ZREM', Q.scheduled, unpack(due))
end
local nxt = rcall('ZRANGE', Q.scheduled, 0, 0, 'WITHSCORES')
local wait = -1
if #nxt > 0 then wait = math.max(0, tonumber(nxt[2]) - now) end
return {promoted, wait}
