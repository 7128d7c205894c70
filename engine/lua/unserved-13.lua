--[[
  Drop the jobs set aside for a task version no worker has served for too long (claim-12.lua
  sets them aside): `dropped` (into the DLQ unless dlq is '0'), each with an UnknownTask error,
  once no worker serving the queue with that task@version was seen (the served HASH) for
  drop_after_ms and the job waited that long too. Removes ids that left (cancelled, expired) and
  task@versions with no job left. Safe with any number of cleaners at once.
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  KEYS[12] the unserved SET (task@version)   KEYS[13] the served HASH (task@version -> ms)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] ttl_ms outside the DLQ
  ARGV[4] unserved ZSET key prefix (keys.QueueKeys.unserved_prefix)   ARGV[5] drop after ms
  ARGV[6] max jobs
  Returns: the number of jobs dropped.
  Events: submitted -> dropped.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[3])
local unserved, served, uprefix = KEYS[12], KEYS[13], ARGV[4]
local after, budget = tonumber(ARGV[5]), tonumber(ARGV[6])
local dropped = 0
for _, tv in ipairs(rcall('SMEMBERS', unserved)) do
  local zkey = uprefix .. tv
  local seen = tonumber(rcall('HGET', served, tv) or '0')
  if Q.now - seen >= after and budget > 0 then
    for _, id in ipairs(rcall('ZRANGE', zkey, 0, budget - 1)) do
      budget = budget - 1
      local key = Q.prefix .. id
      local f = jget(key, F.state, F.unserved, F.unserved_at_ms, F.attempt, F.version)
      if f[1] ~= 'submitted' or f[2] ~= zkey then
        if rcall('ZREM', zkey, id) == 1 then rcall('HINCRBY', Q.stats, 'waiting_version', -1) end
      elseif Q.now - tonumber(f[3] or '0') >= after then
        rcall('ZREM', zkey, id)
        rcall('HINCRBY', Q.stats, 'waiting_version', -1)
        rcall('HDEL', key, F.unserved, F.unserved_at_ms)
        local why = 'no worker with task version ' .. tv .. ' seen for ' .. fmt(after / 1000) .. ' s'
        append_error(key, script_error('UnknownTask', why, tonumber(f[4] or '0'), Q.now))
        emit(Q, id, 'submitted', 'dropped', f[4] or '0', '', why)
        bury(Q, key, id, 'dropped')
        dropped = dropped + 1
      end
    end
  end
  if rcall('EXISTS', zkey) == 0 then rcall('SREM', unserved, tv) end
end
return dropped
