--[[
  Make one queue's declared repeatables (schedules in settings) match a declaration, atomically:
  any number of workers syncing the same declaration at once leave one state.
  KEYS[1] repeats HASH (name -> definition JSON)   KEYS[2] repeat_due ZSET (name -> next tick ms)
  KEYS[3] repeat_last HASH (name -> id of its last tick's job)
  KEYS[4] declared SET (names the last sync declared)
  ARGV[1] number of declared repeatables
  then per repeatable: name, definition JSON (origin "settings"), first tick ms ('' for none)
  Per declared name: none stored -> created; stored with origin "runtime" -> left alone (a
  conflict, not declared); stored overridden (changed at run time) -> kept as it is; stored with
  another definition -> updated (its next tick reset); the same definition -> untouched (its
  next tick kept). Names of `declared` no longer declared are removed, unless stored as "runtime".
  Returns: {0, created, updated, removed, kept overrides, {conflicting names}}.
  Events: none (repeatables are not jobs).
]]
local rcall = redis.call
local repeats, due, last, declared = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local count = tonumber(ARGV[1])
local created, updated, removed, kept, conflicts = 0, 0, 0, 0, {}

-- The stored definition (raw) and its decoded fields; an unreadable one belongs to the
-- declaration when its name is in `declared`.
local function stored(name)
  local raw = rcall('HGET', repeats, name)
  if not raw then return nil, nil end
  local ok, def = pcall(cjson.decode, raw)
  if not ok or type(def) ~= 'table' then
    local ours = rcall('SISMEMBER', declared, name) == 1
    def = {origin = ours and 'settings' or 'runtime'}
  end
  return raw, def
end

local function put(name, def, tick)
  rcall('HSET', repeats, name, def)
  if tick == '' then
    rcall('ZREM', due, name)
  else
    rcall('ZADD', due, tick, name)
  end
  rcall('SADD', declared, name)
end

local wanted = {}
for j = 1, count do
  local i = 2 + (j - 1) * 3
  local name, def, tick = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  wanted[name] = true
  local raw, cur = stored(name)
  if not raw then
    put(name, def, tick)
    created = created + 1
  elseif cur.origin ~= 'settings' then
    conflicts[#conflicts + 1] = name
    rcall('SREM', declared, name)
  elseif cur.overridden == true then
    rcall('SADD', declared, name)
    kept = kept + 1
  elseif raw ~= def then
    put(name, def, tick)
    updated = updated + 1
  else
    rcall('SADD', declared, name)
  end
end

for _, name in ipairs(rcall('SMEMBERS', declared)) do
  if not wanted[name] then
    local raw, cur = stored(name)
    if raw and cur.origin == 'settings' then
      rcall('HDEL', repeats, name)
      rcall('ZREM', due, name)
      rcall('HDEL', last, name)
      removed = removed + 1
    end
    rcall('SREM', declared, name)
  end
end

return {0, created, updated, removed, kept, conflicts}
