--[[
  Hand a started job back to `submitted`, fenced by its token, without using an attempt: for
  shutdown with on_shutdown=resubmit, and for claimed jobs the worker never began.
  KEYS[1] started ZSET   KEYS[2] submitted ZSET   KEYS[3] events STREAM   KEYS[4] marker ZSET
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] job id   ARGV[5] token
  ARGV[6] reason for the event
  Returns: 0 released, -1 not found, -2 lease lost, -3 not started.
  Events: started -> submitted.
]]
--@include common
local Q = with_now({started = KEYS[1], submitted = KEYS[2], events = KEYS[3], marker = KEYS[4],
                   maxlen = ARGV[2]})
local id = ARGV[4]
local key = ARGV[1] .. id
local code, cur = owned(key, ARGV[5], F.attempt, F.begun)
if code ~= 0 then return code end
hand_back(Q, key, id, cur[3], cur[4], ARGV[3], ARGV[6])
return 0
