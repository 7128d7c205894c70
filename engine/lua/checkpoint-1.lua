--[[
  Save a running job's checkpoint, the state its task resumes from, fenced by its token; an
  empty state deletes it. The field stays on the job across retries, stalls, hand-backs and
  resubmits (no other script touches it) until complete-11.lua deletes it or the hash goes.
  The size bound is the caller's (checkpoint_max_bytes, checked before the call).
  KEYS[1] started ZSET (unread: it routes the call to the queue's slot, which the hash shares)
  ARGV[1] job key prefix   ARGV[2] job id   ARGV[3] token   ARGV[4] state JSON ('' deletes it)
  Returns: 0 saved, -1 not found, -2 lease lost, -3 not started.
  Events: none. A checkpoint is no transition, can be large and may be saved every few items:
  it stays in the hash, where the job's readers find it.
]]
--@include common
local key = ARGV[1] .. ARGV[2]
local code = owned(key, ARGV[3])
if code ~= 0 then return code end
if ARGV[4] == '' then
  rcall('HDEL', key, F.checkpoint)
else
  rcall('HSET', key, F.checkpoint, ARGV[4])
end
return 0
