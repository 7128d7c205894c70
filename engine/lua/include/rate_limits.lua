--[[
  Rate limits as theoretical arrival times (GCRA with a burst of one), inlined by claim-12.lua
  and submit-13.lua (`--@include rate_limits`, after common). A limiter holds the earliest time
  its next start may take (ms, '%.3f'); a start at `slot` moves it to slot + its interval. The
  limiters: the queue's (meta field `tat`, its interval meta `rate_interval_ms`), a task's (meta
  field `tat:<task>`), and a rate key's (the job's rate_budget field names a STRING,
  keys.QueueKeys.rate, used instead of the task's): a key's STRING expires when its time comes,
  once no start waits on it, so idle keys cost nothing and their number stays bounded.
  limiters(queue_interval, task, task_interval, budget): the list of {name, interval, keyed}
  that apply (budget: the job's rate key STRING, or nil/false for the task's meta field).
  next_slot(Q, lims, from): the earliest time at or after `from` every limiter allows.
  take_slot(Q, lims, slot): reserve `slot` on each limiter.
  slot_at_submit(Q, task, rate): for a job deciding at submit (rate = [on_rate_limit,
  interval_ms, budget or '']): its slot on the queue's limiter and its own, reserved unless it
  is ahead and the job is to be dropped; returns the slot and whether the job is dropped.
]]
local function limiters(queue_interval, task, task_interval, budget)
  local out = {}
  if queue_interval then out[#out + 1] = {'tat', queue_interval, false} end
  if task_interval and budget then
    out[#out + 1] = {budget, task_interval, true}
  elseif task_interval then
    out[#out + 1] = {'tat:' .. task, task_interval, false}
  end
  return out
end

local function next_slot(Q, lims, from)
  local slot = from
  for _, l in ipairs(lims) do
    local tat
    if l[3] then tat = rcall('GET', l[1]) else tat = rcall('HGET', Q.meta, l[1]) end
    slot = math.max(slot, tonumber(tat or '0'))
  end
  return slot
end

local function take_slot(Q, lims, slot)
  for _, l in ipairs(lims) do
    local tat = slot + l[2]
    if l[3] then
      local ttl = math.max(1, math.ceil(tat - Q.now))
      rcall('SET', l[1], string.format('%.3f', tat), 'PX', fmt(ttl))
    else
      rcall('HSET', Q.meta, l[1], string.format('%.3f', tat))
    end
  end
end

local function slot_at_submit(Q, task, rate)
  local queue_interval = tonumber(rcall('HGET', Q.meta, 'rate_interval_ms'))
  local budget = rate[3] ~= '' and rate[3] or nil
  local lims = limiters(queue_interval, task, tonumber(rate[2]), budget)
  local slot = next_slot(Q, lims, Q.now)
  if slot > Q.now and rate[1] == 'drop' then return slot, true end
  take_slot(Q, lims, slot)
  return slot, false
end
