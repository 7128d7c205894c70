--[[
  End a started job in a dead state, fenced by its token: `failed` (exception, retries exhausted,
  invalid payload), `dropped` (no function for its name and version), `cancelled` (a user
  cancelled it while it ran) or `stalled` (shutdown with on_shutdown=stop). Failures go into the
  DLQ unless the job's dlq field is '0'; cancelled jobs and dlq '0' keep their hash for ttl_ms (PEXPIRE),
  and a state the job's cleanup_ms names (its task's cleanup_on) for that long instead (bury).
  Jobs waiting for it get their on_parent_failure policy.
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] job id   ARGV[5] token
  ARGV[6] state   ARGV[7] error JSON object   ARGV[8] short error for the event   ARGV[9] ttl_ms
  Returns: 0 done, -1 not found, -2 lease lost, -3 not started.
  Events: started -> failed | dropped | cancelled | stalled; blocked -> failed | cancelled.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[9])
local worker, id, token = ARGV[3], ARGV[4], ARGV[5]
local state, err, short = ARGV[6], ARGV[7], ARGV[8]
local key = Q.prefix .. id
local code, cur = owned(key, token, F.attempt)
if code ~= 0 then return code end
append_error(key, err)
rcall('ZREM', Q.started, id)
wake_if_capped(Q)
emit(Q, id, 'started', state, cur[3], worker, short)
bury(Q, key, id, state)
return 0
