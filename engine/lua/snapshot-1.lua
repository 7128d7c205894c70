--[[
  Read the hashes of many jobs of one queue in one call (the mirror's batch read).
  KEYS[1] events STREAM (not read: it routes the call to the queue's slot)
  ARGV[1] job key prefix   ARGV[2..] job ids
  Returns: one flat field/value array per id, empty for a job Redis no longer holds.
  Events: none (a read).
]]
local prefix = ARGV[1]
local out = {}
for i = 2, #ARGV do
  out[i - 1] = redis.call('HGETALL', prefix .. ARGV[i])
end
return out
