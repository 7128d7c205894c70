--[[
  Deadlines of queued jobs, inlined by submit-13.lua (`--@include deadlines`).
  deadline_of(Q, spec, due): the earliest of the job's limits, read from its submitted fields
  (spec[6..], field/value pairs): ttl_ms from now, good_until_ms, and queue_timeout_ms from when
  it is due (`due`, or now when nil); nil if none. submit-13.lua stores it on the job
  (deadline_ms) and in the deadlines ZSET, where expire-11.lua finds it.
]]
local LIMITS = {[F.ttl_ms] = 'ttl_ms', [F.good_until_ms] = 'good_until_ms',
                [F.queue_timeout_ms] = 'queue_timeout_ms'}

local function deadline_of(Q, spec, due)
  local now = Q.now
  local limits = {}
  for i = 6, #spec - 1, 2 do
    local limit = LIMITS[spec[i]]
    if limit then limits[limit] = tonumber(spec[i + 1]) end
  end
  local deadline = nil
  if limits.ttl_ms then deadline = now + limits.ttl_ms end
  if limits.good_until_ms and (not deadline or limits.good_until_ms < deadline) then
    deadline = limits.good_until_ms
  end
  if limits.queue_timeout_ms then
    local start = math.max(now, due or now)
    if not deadline or start + limits.queue_timeout_ms < deadline then
      deadline = start + limits.queue_timeout_ms
    end
  end
  return deadline
end
