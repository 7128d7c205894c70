--[[
  Read the hashes of many jobs of one queue in one call (the mirror's batch read).
  KEYS[1] events STREAM (not read: it routes the call to the queue's slot)
  ARGV[1] job key prefix   ARGV[2..] job ids
  Returns: per id, the job hash as one JSON object of its string fields (one reply string
  to parse instead of a field/value array), or nil for a job Redis no longer holds.
  Events: none (a read).
]]
local prefix = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local flat = redis.call('HGETALL', prefix .. ARGV[i])
  if #flat == 0 then
    out[i - 1] = false
  else
    local fields = {}
    for j = 1, #flat, 2 do
      fields[flat[j]] = flat[j + 1]
    end
    out[i - 1] = cjson.encode(fields)
  end
end
return out
