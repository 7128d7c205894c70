--[[
  Cancel jobs. A queued job (submitted, scheduled, blocked) ends `cancelled` at once. A started
  job gets a durable cancel mark (cancel_requested_at_ms) that its worker reads with its next
  lease renewal; the worker then stops it and writes `cancelled`. Terminal jobs are left alone.
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] ttl_ms of cancelled jobs   then job ids
  Returns: one code per id: 0 cancelled, 1 cancel requested (running), -1 not found, -3 terminal.
  Events: submitted | scheduled | blocked -> cancelled.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[3])
local out = {}
for j = 4, #ARGV do
  local id = ARGV[j]
  local key = Q.prefix .. id
  local cur = jget(key, F.state, F.attempt)
  local state = cur[1]
  if not state then
    out[#out + 1] = -1
  elseif state == 'submitted' or state == 'scheduled' or state == 'blocked' then
    unqueue(Q, id)
    emit(Q, id, state, 'cancelled', cur[2] or '0', '', 'cancelled by user')
    bury(Q, key, id, 'cancelled')
    out[#out + 1] = 0
  elseif state == 'started' then
    rcall('HSET', key, F.cancel_requested_at_ms, Q.now_s)
    out[#out + 1] = 1
  else
    out[#out + 1] = -3
  end
end
return out
