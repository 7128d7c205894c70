--[[
  Store a running job's progress and message, fenced by its token, and event it.
  KEYS[1] events STREAM
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] job id   ARGV[4] token
  ARGV[5] percent (0-100)  ARGV[6] message   ARGV[7] worker id
  Returns: 0 stored, -2 lease lost.
  Events: started -> started with progress and message fields.
]]
--@include common
local prefix, maxlen, id, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local key = prefix .. id
local cur = jget(key, F.token, F.attempt)
if not cur[1] or cur[1] ~= token then return -2 end
local now = now_ms()
rcall('HSET', key, F.progress, ARGV[5], F.progress_message, ARGV[6])
rcall('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*', 'job', id, 'from', 'started', 'to', 'started',
      'at', fmt(now), 'attempt', cur[2] or '0', 'worker', ARGV[7], 'error', '',
      'progress', ARGV[5], 'message', ARGV[6])
return 0
