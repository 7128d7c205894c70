--[[
  Append one line to a running job's log, fenced by its token, keep the newest lines within the
  caps, and event it. The log is the job hash's `logs` field (a JSON array of
  {"at_ms", "attempt", "message"} objects, written only here), so it expires and is deleted
  with the job. `logs_count` holds its number of lines; `logs_dropped` counts the lines dropped
  (oldest first) to stay within ARGV[7] lines and ARGV[8] bytes of JSON text. A line that alone
  is over the byte cap is not stored and counts as dropped. A line sent again with the line id
  of the last one stored (a write that timed out on a stalled Redis, then ran) is not stored
  twice: `logs_last` keeps the token and line id of the last line.
  KEYS[1] events STREAM
  ARGV[1] job key prefix   ARGV[2] events maxlen   ARGV[3] job id   ARGV[4] token
  ARGV[5] message          ARGV[6] worker id       ARGV[7] max lines   ARGV[8] max bytes
  ARGV[9] line id ('' for none)
  Returns: 0 stored (or stored before), -2 lease lost.
  Events: started -> started with a `log` field (the message).
]]
--@include common
local prefix, maxlen, id, token, message = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local max_lines, max_bytes = tonumber(ARGV[7]), tonumber(ARGV[8])
local key = prefix .. id
local cur = jget(key, F.token, F.attempt, F.logs, F.logs_count, F.logs_last)
if not cur[1] or cur[1] ~= token then return -2 end
local last = ''
if ARGV[9] ~= '' then
  last = token .. ':' .. ARGV[9]
  if cur[5] == last then return 0 end
end
local now = now_ms()
local attempt = cur[2] or '0'
-- The key `at_ms` comes first: `,{"at_ms":` cannot occur inside an encoded message (its quotes
-- are escaped), so it marks where each line after the first begins.
local line = '{"at_ms":' .. fmt(now) .. ',"attempt":' .. attempt .. ',"message":'
  .. cjson.encode(message) .. '}'
local body = ''
if cur[3] and #cur[3] > 2 then body = string.sub(cur[3], 2, -2) end
local count = tonumber(cur[4] or '0')
if body == '' then count = 0 end
-- Drop the oldest lines until the new one fits: `start` is where the kept lines begin.
local start, dropped = 1, 0
local function over()
  local size = #body - start + 1
  local sep = 0
  if size > 0 then sep = 1 end
  return count + 1 > max_lines or size + sep + #line + 2 > max_bytes
end
while count > 0 and over() do
  local cut = string.find(body, ',{"at_ms":', start, true)
  if cut then start = cut + 1 else start = #body + 1 end
  count = count - 1
  dropped = dropped + 1
end
body = string.sub(body, start)
if #line + 2 > max_bytes then
  dropped = dropped + 1
elseif body == '' then
  body, count = line, 1
else
  body, count = body .. ',' .. line, count + 1
end
rcall('HSET', key, F.logs, '[' .. body .. ']', F.logs_count, count)
if last ~= '' then rcall('HSET', key, F.logs_last, last) end
if dropped > 0 then rcall('HINCRBY', key, F.logs_dropped, dropped) end
rcall('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*', 'job', id, 'from', 'started', 'to', 'started',
      'at', fmt(now), 'attempt', attempt, 'worker', ARGV[6], 'error', '', 'log', message)
return 0
