--[[
  Count a stall reported by a live worker, fenced by the job's token: the child process that ran
  the job alone died under it (a crash, os._exit, the OOM killer). Past the job's max_stalls it
  ends `stalled` (into the DLQ unless its dlq field is '0'), else it goes back to `submitted`.
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] job id   ARGV[5] token
  ARGV[6] error JSON object   ARGV[7] short reason for the event   ARGV[8] ttl_ms outside the DLQ
  Returns: 1 ended stalled, 0 back in `submitted`, -1 not found, -2 lease lost, -3 not started.
  Events: started -> stalled | submitted.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[8])
local worker, id, token = ARGV[3], ARGV[4], ARGV[5]
local key = Q.prefix .. id
local code, cur = owned(key, token, F.attempt)
if code ~= 0 then return code end
return stall(Q, key, id, cur[3], worker, ARGV[6], ARGV[7])
