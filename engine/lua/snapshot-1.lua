--[[
  Read the hashes of many jobs of one queue in one call (the mirror's batch reads).
  KEYS[1] events STREAM (not read: it routes the call to the queue's slot)
  ARGV[1] job key prefix   ARGV[2] queue name   ARGV[3] one field to read, or '' for the whole hash
  ARGV[4] that field's name in the other format (engine/fields.py: read if the first is absent)
  ARGV[5..] job ids
  Returns: per id, the job hash as one JSON object of its string fields (one reply string
  to parse instead of a field/value array) with its `id` and `queue` (the key holds them:
  submit-13.lua does not store them), or with a field, that field's value; nil for a job
  Redis no longer holds (or, with a field, that has no such field).
  Events: none (a read).
]]
local prefix, queue, field, other = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local out = {}
for i = 5, #ARGV do
  local key = prefix .. ARGV[i]
  if field ~= '' then
    out[i - 4] = redis.call('HGET', key, field) or redis.call('HGET', key, other)
  else
    local flat = redis.call('HGETALL', key)
    if #flat == 0 then
      out[i - 4] = false
    else
      local fields = {[F.id] = ARGV[i], [F.queue] = queue}
      for j = 1, #flat, 2 do
        fields[flat[j]] = flat[j + 1]
      end
      out[i - 4] = cjson.encode(fields)
    end
  end
end
return out
