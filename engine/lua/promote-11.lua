--[[
  Promote scheduled jobs to `submitted`: the due ones, oldest due first, at most N per call; or,
  when job ids follow, those ids at once whatever their due time (an operator's "run now").
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] max jobs   then job ids
  Returns: {promoted count, ms until the next scheduled job is due (-1 when none)}, then with ids
  one code per id: 0 promoted, -1 not found, -3 not scheduled.
  Ids (due or given) whose hash is gone or not `scheduled` leave the scheduled ZSET. Events: scheduled -> submitted.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2])
local limit = tonumber(ARGV[3])
local now = Q.now
local promoted = 0
local codes = {}
local function promote(id, seq)
  local key = Q.prefix .. id
  local cur = jget(key, F.state, F.priority, F.attempt)
  if cur[1] ~= 'scheduled' then return cur[1] and -3 or -1 end
  rcall('HSET', key, F.state, 'submitted', F.submitted_at_ms, fmt(now))
  make_ready(Q, key, id, cur[2], seq)
  emit(Q, id, 'scheduled', 'submitted', cur[3] or '0')
  promoted = promoted + 1
  return 0
end
if #ARGV > 3 then
  local seq = rcall('INCRBY', Q.seq, #ARGV - 3) - (#ARGV - 3)
  for j = 4, #ARGV do
    codes[#codes + 1] = promote(ARGV[j], seq + j - 3)
  end
  rcall('ZREM', Q.scheduled, unpack(ARGV, 4))
else
  local due = rcall('ZRANGEBYSCORE', Q.scheduled, '-inf', fmt(now), 'LIMIT', 0, limit)
  if #due > 0 then
    local seq = rcall('INCRBY', Q.seq, #due) - #due
    for j, id in ipairs(due) do promote(id, seq + j) end
    rcall('ZREM', Q.scheduled, unpack(due))
  end
end
local nxt = rcall('ZRANGE', Q.scheduled, 0, 0, 'WITHSCORES')
local wait = -1
if #nxt > 0 then wait = math.max(0, tonumber(nxt[2]) - now) end
local out = {promoted, wait}
for _, code in ipairs(codes) do out[#out + 1] = code end
return out
