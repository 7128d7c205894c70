--[[
  End a started job in a dead state, fenced by its token: `failed` (exception, retries exhausted,
  invalid payload), `dropped` (no function for its name and version), `cancelled` (a user
  cancelled it while it ran) or `stalled` (shutdown with on_shutdown=stop). Failures go into the
  DLQ unless the job's dlq field is '0'; cancelled jobs and dlq '0' go to `done` with an expiry.
  KEYS[1] started ZSET   KEYS[2] dlq ZSET   KEYS[3] done ZSET   KEYS[4] events STREAM   KEYS[5] stats HASH
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] job id   ARGV[5] token
  ARGV[6] state   ARGV[7] error JSON object   ARGV[8] short error for the event   ARGV[9] ttl_ms
  Returns: 0 done, -1 not found, -2 lease lost, -3 not started.
  Events: started -> failed | dropped | cancelled | stalled.
]]
--@include common
local started, dlq, done, events, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, maxlen, worker, id, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local state, err, short, ttl = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local key = prefix .. id
local code, cur = owned(key, token, 'attempt')
if code ~= 0 then return code end
local now = now_ms()
append_error(key, err)
rcall('ZREM', started, id)
bury(key, id, state, now, dlq, done, stats, ttl)
emit(events, maxlen, id, 'started', state, now, cur[3], worker, short)
return 0
