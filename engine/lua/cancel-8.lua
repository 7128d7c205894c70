--[[
  Cancel jobs. A queued job (submitted, scheduled, blocked) ends `cancelled` at once. A started
  job gets a durable cancel mark (cancel_requested_at_ms) that its worker reads with its next
  lease renewal; the worker then stops it and writes `cancelled`. Terminal jobs are left alone.
  KEYS[1] submitted ZSET   KEYS[2] scheduled ZSET   KEYS[3] blocked SET   KEYS[4] dlq ZSET
  KEYS[5] done ZSET        KEYS[6] events STREAM    KEYS[7] stats HASH   KEYS[8] deadlines ZSET
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] ttl_ms of cancelled jobs   then job ids
  Returns: one code per id: 0 cancelled, 1 cancel requested (running), -1 not found, -3 terminal.
  Events: submitted | scheduled | blocked -> cancelled.
]]
--@include common
local submitted, scheduled, blocked, dlq, done, events, stats, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local prefix, maxlen, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local out = {}
for j = 4, #ARGV do
  local id = ARGV[j]
  local key = prefix .. id
  local cur = rcall('HMGET', key, 'state', 'attempt')
  local state = cur[1]
  if not state then
    out[#out + 1] = -1
  elseif state == 'submitted' or state == 'scheduled' or state == 'blocked' then
    rcall('ZREM', submitted, id)
    rcall('ZREM', scheduled, id)
    rcall('SREM', blocked, id)
    rcall('ZREM', deadlines, id)
    bury(key, id, 'cancelled', now, dlq, done, stats, ttl)
    emit(events, maxlen, id, state, 'cancelled', now, cur[2] or '0', '', 'cancelled by user')
    out[#out + 1] = 0
  elseif state == 'started' then
    rcall('HSET', key, 'cancel_requested_at_ms', fmt(now))
    out[#out + 1] = 1
  else
    out[#out + 1] = -3
  end
end
return out
