--[[
  Hand back the started jobs a worker holds on the server but not in memory: those a claim (or a
  begin) of its took while the reply never reached it (a reset connection, a failover, a claim
  queued behind its wait whose connection dropped). The worker calls this once Redis answers
  again, with every token it holds in the queue; each other job in `started` that names it as
  its worker goes back to `submitted` without using an attempt, as release-4.lua does, at once
  rather than when its lease runs out (which would count a stall).
  Cost: one HMGET per entry of the queue's `started` ZSET; it runs only after a lost reply.
  KEYS[1] started ZSET   KEYS[2] submitted ZSET   KEYS[3] events STREAM   KEYS[4] marker ZSET
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] worker id
  ARGV[4..] held: the tokens the worker holds in this queue
  Returns: the ids handed back.
  Events: started -> submitted.
]]
--@include common
local Q = with_now({started = KEYS[1], submitted = KEYS[2], events = KEYS[3], marker = KEYS[4],
                   maxlen = ARGV[2]})
local worker = ARGV[3]
local held = {}
for i = 4, #ARGV do held[ARGV[i]] = true end
local out = {}
for _, id in ipairs(rcall('ZRANGE', Q.started, 0, -1)) do
  local key = ARGV[1] .. id
  local cur = jget(key, F.state, F.token, F.worker, F.attempt, F.begun)
  if cur[1] == 'started' and cur[3] == worker and cur[2] and not held[cur[2]] then
    hand_back(Q, key, id, cur[4], cur[5], worker, 'the reply of its claim or begin was lost')
    out[#out + 1] = id
  end
end
return out
