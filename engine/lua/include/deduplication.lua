--[[
  Deduplication by a dedup key naming the job that holds it, inlined by submit-13.lua
  (`--@include deduplication`, after common). dedup is the spec's [key, mode, ttl_ms].
  deduplicate(Q, id, dedup): nil to go on submitting job `id`, or the outcome 'deduplicated'
  with the id and state of the job holding the key ('' when its hash is gone). simple: while
  the holder is not finished; throttle: while the key lives; debounce: a holder that still
  waits is replaced (it ends `cancelled`, event and error 'Debounced'), and the new job goes on.
  Either way the stream gets a note on the holder (note(): `note` deduplicated or debounced,
  `other` the new job's id; from = to, so no reader takes it for a transition).
  hold_dedup(dedup, id): make job `id` the holder of the key (for ttl_ms when > 0).
]]
local QUEUED = {submitted = true, scheduled = true, blocked = true}

local function note(Q, owner, state, what, other)
  rcall('XADD', Q.events, 'MAXLEN', '~', Q.maxlen, '*', 'job', owner, 'from', state, 'to', state,
        'at', Q.now_s, 'attempt', '0', 'worker', '', 'error', '', 'note', what, 'other', other)
end

local function deduplicate(Q, id, dedup)
  local owner = rcall('GET', dedup[1])
  if not owner then return nil end
  local state = jget(Q.prefix .. owner, F.state)[1]
  if dedup[2] == 'debounce' and QUEUED[state] then
    local okey = Q.prefix .. owner
    unqueue(Q, owner)
    append_error(okey, cjson.encode({type = 'Debounced', message = 'replaced by ' .. id, attempt = 0, at_ms = Q.now}))
    emit(Q, owner, state, 'cancelled', rcall('HGET', okey, F.attempt) or '0', '', 'replaced by ' .. id)
    bury(Q, okey, owner, 'cancelled')
    note(Q, owner, 'cancelled', 'debounced', id)
    return nil
  end
  if dedup[2] == 'throttle' then
    note(Q, owner, state or '', 'deduplicated', id)
    return 'deduplicated', owner, state or ''
  end
  if dedup[2] == 'simple' and state and not DEAD[state] and state ~= 'completed' then
    note(Q, owner, state, 'deduplicated', id)
    return 'deduplicated', owner, state
  end
  return nil
end

local function hold_dedup(dedup, id)
  if tonumber(dedup[3]) > 0 then
    rcall('SET', dedup[1], id, 'PX', dedup[3])
  else
    rcall('SET', dedup[1], id)
  end
end
