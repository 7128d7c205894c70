--[[
  Complete a batch of started jobs, each fenced by its lease token.
  KEYS[1] started ZSET   KEYS[2] done ZSET (id -> expires_at_ms)   KEYS[3] events STREAM   KEYS[4] stats HASH
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id   ARGV[4] number of jobs
  then per job: id, token, result JSON, result_ttl_ms
  Returns: one code per job: 0 completed, -1 not found, -2 lease lost (token differs), -3 not started.
  Events: started -> completed.
]]
--@include common
local started, done, events, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, maxlen, worker, count = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local out = {}
for j = 1, count do
  local i = 5 + (j - 1) * 4
  local id, token, result, ttl = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local key = prefix .. id
  local code, cur = owned(key, token, 'attempt')
  if code ~= 0 then
    out[j] = code
  else
    rcall('HSET', key, 'state', 'completed', 'result', result, 'completed_at_ms', fmt(now))
    rcall('HDEL', key, 'token')
    rcall('ZREM', started, id)
    rcall('ZADD', done, fmt(now + ttl), id)
    rcall('PEXPIRE', key, ttl)
    rcall('HINCRBY', stats, 'completed', 1)
    emit(events, maxlen, id, 'started', 'completed', now, cur[3], worker)
    out[j] = 0
  end
end
return out
