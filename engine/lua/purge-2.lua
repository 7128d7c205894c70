--[[
  Purge finished jobs: delete the hashes of terminal jobs and their DLQ entries.
  Live jobs (submitted, scheduled, blocked, started) are left alone, and with a state given, the
  jobs in any other (clearing a queue's jobs of one state: engine/resources/clearing.py).
  KEYS[1] dlq ZSET   KEYS[2] deadlines ZSET
  ARGV[1] job key prefix   ARGV[2] only this state ('': any terminal one)   then job ids
  Returns: one code per id: 0 purged, -1 not found, -3 not terminal (or not of the state given).
  Events: none (the history keeps what happened; purging is not a transition).
]]
--@include common
local dlq, deadlines = KEYS[1], KEYS[2]
local prefix, only = ARGV[1], ARGV[2]
local terminal = {completed = true, failed = true, cancelled = true, stalled = true, dropped = true, expired = true}
local out = {}
for j = 3, #ARGV do
  local id = ARGV[j]
  local state = jget(prefix .. id, F.state)[1]
  if not state then
    out[#out + 1] = -1
  elseif not terminal[state] or (only ~= '' and state ~= only) then
    out[#out + 1] = -3
  else
    forget(prefix .. id)
    rcall('ZREM', dlq, id)
    rcall('ZREM', deadlines, id)
    out[#out + 1] = 0
  end
end
return out
