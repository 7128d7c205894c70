--[[
  Retention of the DLQ: trim it by age and length (finished jobs outside the DLQ expire by
  themselves: their hashes carry the result ttl).
  KEYS[1] dlq ZSET (id -> dead_at_ms)   KEYS[2] deadlines ZSET
  ARGV[1] job key prefix   ARGV[2] max jobs per call   ARGV[3] DLQ max age ms (0: no limit)
  ARGV[4] DLQ max length (0: no limit)
  Returns: the number of DLQ jobs deleted.
  Events: none (retention is not a transition).
]]
--@include common
local dlq, deadlines = KEYS[1], KEYS[2]
local prefix, limit, max_age, max_len = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local function drop(ids)
  for _, id in ipairs(ids) do
    forget(prefix .. id)
    rcall('ZREM', dlq, id)
    rcall('ZREM', deadlines, id)
  end
  return #ids
end
local trimmed = 0
if max_age > 0 then
  trimmed = drop(rcall('ZRANGEBYSCORE', dlq, '-inf', fmt(now - max_age), 'LIMIT', 0, limit))
end
if max_len > 0 then
  local over = rcall('ZCARD', dlq) - max_len
  if over > 0 then trimmed = trimmed + drop(rcall('ZRANGE', dlq, 0, math.min(over, limit) - 1)) end
end
return trimmed
