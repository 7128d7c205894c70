--[[
  Repeatable ticks, inlined by submit-13.lua (`--@include repeat_ticks`, after common).
  rep is the spec's [name, due_ms, next_ms, skip_if_running, limit]; repeat_due is the ZSET
  (name -> next tick ms), repeat_last the HASH (name -> id of its last tick's job, and
  `fired|<name>` -> ticks it fired).
  take_tick(Q, repeat_due, repeat_last, rep): nil when this scheduler took the tick (it was
  still `due`; the next moves to next_ms, or the repeatable is done when next_ms < 0), else the
  outcome: 'stale' (another scheduler took it), 'skipped' (the previous tick's job still runs
  and skip_if_running is '1'; the tick is taken all the same).
  record_tick(repeat_due, repeat_last, rep, id): remember job `id` as the repeatable's last
  tick and count the tick; the one that reaches its limit (> 0) ends the repeatable's ticks.
]]
local function take_tick(Q, repeat_due, repeat_last, rep)
  local name, due, nxt = rep[1], rep[2], tonumber(rep[3])
  if rcall('ZSCORE', repeat_due, name) ~= due then return 'stale' end
  if nxt < 0 then rcall('ZREM', repeat_due, name) else rcall('ZADD', repeat_due, fmt(nxt), name) end
  if rep[4] == '1' then
    local last = rcall('HGET', repeat_last, name)
    local state = last and jget(Q.prefix .. last, F.state)[1]
    if state and not DEAD[state] and state ~= 'completed' then return 'skipped' end
  end
  return nil
end

local function record_tick(repeat_due, repeat_last, rep, id)
  rcall('HSET', repeat_last, rep[1], id)
  local fired = rcall('HINCRBY', repeat_last, 'fired|' .. rep[1], 1)
  local limit = tonumber(rep[5] or 0)
  if limit > 0 and fired >= limit then rcall('ZREM', repeat_due, rep[1]) end
end
