--[[
  Drain: cancel, from one chunk of one of a queue's waiting structures, the jobs that were
  waiting before the drain began: state submitted, scheduled or blocked, and submitted_at_ms
  (when the job last became ready or was submitted) at or before the cutoff. Jobs enqueued
  after the cutoff are kept. engine/resources/drain.py walks every structure chunk by chunk.
  KEYS[1..11] the queue keys (keys.QUEUE_KEYS)
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] ttl_ms of cancelled jobs
  ARGV[4] cutoff ms (server time when the drain began)   ARGV[5] source key (of this queue)
  ARGV[6] source kind: 'zset' (walked by score, a cursor 'score offset') or 'set' (SSCAN)
  ARGV[7] cursor ('' to start)   ARGV[8] max jobs looked at
  Returns: {next cursor ('' when the source is done), cancelled, looked at}.
  Events: submitted | scheduled | blocked -> cancelled.
]]
--@include common
local Q = queue(ARGV[1], ARGV[2], ARGV[3])
local cutoff, source, kind = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local cursor, count = ARGV[7], tonumber(ARGV[8])
local ids, scores, nxt = {}, {}, ''
local score, offset = '-inf', 0
if kind == 'set' then
  local got = rcall('SSCAN', source, cursor == '' and '0' or cursor, 'COUNT', count)
  ids = got[2]
  if got[1] ~= '0' then nxt = got[1] end
else
  if cursor ~= '' then
    local s, o = string.match(cursor, '^(%S+) (%d+)$')
    score, offset = s, tonumber(o)
  end
  local got = rcall('ZRANGEBYSCORE', source, score, '+inf', 'WITHSCORES', 'LIMIT', offset, count)
  for i = 1, #got, 2 do
    ids[#ids + 1] = got[i]
    scores[#scores + 1] = got[i + 1]
  end
end
local waiting = {submitted = true, scheduled = true, blocked = true}
local cancelled = 0
local kept_at_last = 0  -- jobs kept with the chunk's last score (the next chunk skips them)
for i, id in ipairs(ids) do
  local key = Q.prefix .. id
  local cur = jget(key, F.state, F.attempt, F.submitted_at_ms)
  local old = cur[3] and tonumber(cur[3]) <= cutoff
  if waiting[cur[1]] and old then
    unqueue(Q, id)  -- bury's free_slot takes it out of a concurrency key's waiting ZSET
    emit(Q, id, cur[1], 'cancelled', cur[2] or '0', '', 'queue drained')
    bury(Q, key, id, 'cancelled')
    cancelled = cancelled + 1
  elseif kind == 'zset' and rcall('ZSCORE', source, id) then
    if scores[i] == scores[#scores] then kept_at_last = kept_at_last + 1 end
  end
end
if kind == 'zset' and #ids == count then
  local last = scores[#scores]
  nxt = last .. ' ' .. ((last == score and offset or 0) + kept_at_last)
end
return {nxt, cancelled, #ids}
