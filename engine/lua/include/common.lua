--[[
  Shared helpers, inlined by engine/scripts.py where a script says `--@include common`.
  now_ms(): Redis server time in ms. fmt(n): a number as an exact integer string.
  ready_score(priority, seq): ZSET score of a ready job (higher priority first, then arrival).
  emit(...): append one transition event to the queue's stream.
  append_error(key, err): append one JSON error object to the job's `errors` JSON array.
]]
local rcall = redis.call

local function now_ms()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%.0f', n)
end

local function ready_score(priority, seq)
  return fmt((100 - tonumber(priority)) * 10000000000000 + seq)
end

local function emit(events, maxlen, id, from, to, at, attempt, worker, err)
  if worker == nil or worker == false then worker = '' end
  if err == nil or err == false then err = '' end
  rcall('XADD', events, 'MAXLEN', '~', maxlen, '*', 'job', id, 'from', from, 'to', to,
        'at', fmt(at), 'attempt', attempt or '0', 'worker', worker, 'error', err)
end

local function append_error(key, err)
  local errors = rcall('HGET', key, 'errors')
  if not errors or errors == '' or errors == '[]' then
    errors = '[' .. err .. ']'
  else
    errors = string.sub(errors, 1, -2) .. ',' .. err .. ']'
  end
  rcall('HSET', key, 'errors', errors)
end
