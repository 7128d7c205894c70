--[[
  Trim a queue's event stream by the progress of the consumer groups that must see every event
  (the mirror's, and any other live group: the transition hooks'), within a hard cap.
  KEYS[1] events STREAM   KEYS[2] stats HASH   KEYS[3] missed SET (job ids to rebuild)
  ARGV[1] hard cap (entries)   ARGV[2] max entries trimmed past the group per call
  ARGV[3] max job ids the missed SET holds   ARGV[4] group ('': none)
  ARGV[5] max entries kept without the group   ARGV[6..] holding: other groups it keeps entries for
  Entries older than the oldest one the group, or any of the other groups the stream has, has not
  acknowledged go (a group's oldest pending entry, else the one after its last delivered). The
  rest stays, up to the hard cap: past it, the oldest entries go even though the group never
  acknowledged them, at most ARGV[2] a call, and
  the job of each is added to the missed SET (the mirror rebuilds those jobs from their hashes
  and removes them), or, once the SET is full (ARGV[3] ids), counted as unrecorded.
  Without the group (no mirror ever started: the history does not read the stream) it keeps
  the ARGV[5] newest entries at most (MAXLEN ~), whatever the other groups read.
  Stats: `gap_entries` entries trimmed before the group read them, `gap_jobs` jobs added to the
  missed SET, `gap_unrecorded` jobs beyond its limit; the mirror adds `gap_rebuilt` and
  `gap_lost` (engine/resources/metrics.py reads them all).
  Returns: {entries trimmed in all, entries trimmed past the group, jobs added to missed}.
  Events: none (trimming is not a transition).
]]
local events, stats, missed = KEYS[1], KEYS[2], KEYS[3]
local cap, batch, missed_max, group = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local ungrouped = tonumber(ARGV[5])
local rcall = redis.call

local length = rcall('XLEN', events)
if length == 0 then return {0, 0, 0} end

local function split(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function after(id)
  local ms, seq = split(id)
  return string.format('%.0f-%.0f', ms, seq + 1)
end

local holding = {}
for i = 6, #ARGV do holding[ARGV[i]] = true end

local function older(a, b)
  local ams, aseq = split(a)
  local bms, bseq = split(b)
  return ams < bms or (ams == bms and aseq < bseq)
end

-- The oldest entry a group still needs: its oldest pending one, else the one after its last.
local floor = nil
local present = false
for _, g in ipairs(rcall('XINFO', 'GROUPS', events)) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  if info['name'] == group then present = true end
  if info['name'] == group or holding[info['name']] then
    local needs
    if tonumber(info['pending']) > 0 then
      needs = rcall('XPENDING', events, info['name'])[2]
    else
      needs = after(info['last-delivered-id'])
    end
    if floor == nil or older(needs, floor) then floor = needs end
  end
end

if not present then
  return {rcall('XTRIM', events, 'MAXLEN', '~', math.min(cap, ungrouped)), 0, 0}
end
local trimmed = 0
if floor then trimmed = rcall('XTRIM', events, 'MINID', floor) end
local over = length - trimmed - cap
if over <= 0 then return {trimmed, 0, 0} end

-- Past the cap with the group behind: the oldest entries go, their jobs recorded to rebuild.
local entries = rcall('XRANGE', events, '-', '+', 'COUNT', math.min(over, batch))
local seen, added, unrecorded = {}, 0, 0
local room = missed_max - rcall('SCARD', missed)
for _, entry in ipairs(entries) do
  local f = entry[2]
  local job = nil
  for i = 1, #f, 2 do
    if f[i] == 'job' then job = f[i + 1]; break end
  end
  if job and job ~= '' and not seen[job] then
    seen[job] = true
    if rcall('SISMEMBER', missed, job) == 0 then
      if room > 0 then
        rcall('SADD', missed, job)
        room = room - 1
        added = added + 1
      else
        unrecorded = unrecorded + 1
      end
    end
  end
end
local dropped = rcall('XTRIM', events, 'MINID', after(entries[#entries][1]))
rcall('HINCRBY', stats, 'gap_entries', dropped)
if added > 0 then rcall('HINCRBY', stats, 'gap_jobs', added) end
if unrecorded > 0 then rcall('HINCRBY', stats, 'gap_unrecorded', unrecorded) end
return {trimmed + dropped, dropped, added}
