-- The rule's history, shared by the three scripts (scripts.go puts it in
-- each, where it says so): the arguments from ARGV[on] on, triples of a
-- rule (step, capacity: the script's own pair, which okRule checks) and
-- the end of its time (µs of Redis's clock), oldest first; a first triple
-- (0, 0, end) says that what came before end is not known.
local hs, hc, he = {}, {}, {}
do
  local a = #ARGV - on + 1
  if a < 0 or a % 3 ~= 0 then return redis.error_reply('floodgate: bad history: ' .. a .. ' arguments') end
  for i = 1, a / 3 do
    local s, c, e = tonumber(ARGV[on + 3 * i - 3]), tonumber(ARGV[on + 3 * i - 2]), tonumber(ARGV[on + 3 * i - 1])
    if not (s and c and e and e >= 0 and e <= 2^52 and e % 1 == 0 and (i == 1 or e >= he[i - 1])
        and ((i == 1 and s == 0 and c == 0) or okRule(s, c))) then
      return redis.error_reply('floodgate: bad history: ' ..
        table.concat({tostring(ARGV[on + 3 * i - 3]), tostring(ARGV[on + 3 * i - 2]), tostring(ARGV[on + 3 * i - 1])}, ', '))
    end
    hs[i], hc[i], he[i] = s, c, e
  end
end
local m = #hs

-- changes says how a key written at w under rule (s, c) comes to the
-- call's rule (cs, cc): nil when it is read as it stands; else the first
-- change it converts at, or m + 1 for one conversion at now. The rule in
-- force at w is the first in the history whose end lies after w (the
-- call's own rule if none; at a tie, the one before if that is the
-- key's): if it is the key's rule, the key converts at
-- its end and at every change after (or, written before a history cut
-- short, holds nothing at its end); if not, the key was written by a
-- replica that ran another rule, and is read as it stands when that is
-- the call's rule, else converted at now.
local function changes(w, s, c, cs, cc)
  local function ours(j) -- the key's rule is the j-th's (m + 1: the call's)
    if j > m then return s == cs and c == cc end
    return hs[j] == s and hc[j] == c
  end
  local i = 1
  while i <= m and w >= he[i] do i = i + 1 end
  -- A key written at the very instant of a change may be of the rule
  -- before it: a request that raced the change.
  if i > 1 and w == he[i - 1] and not ours(i) and ours(i - 1) then i = i - 1 end
  if i <= m and (hs[i] == 0 or ours(i)) then return i end
  if s == cs and c == cc then return nil end
  return m + 1
end

-- convert brings a key from rule (s, c), by change i on (see changes), to
-- the call's rule (cs, cc), with the script's convertAt(x, s, c, s2, c2)
-- and emptyAt(x, s2, c2). A change is never later than now.
local function convert(i, s, c, cs, cc, convertAt, emptyAt)
  if i > m then
    convertAt(now, s, c, cs, cc)
    return
  end
  for j = i, m do
    local x = math.min(he[j], now)
    local s2, c2 = cs, cc
    if j < m then s2, c2 = hs[j + 1], hc[j + 1] end
    if hs[j] == 0 then emptyAt(x, s2, c2) else convertAt(x, hs[j], hc[j], s2, c2) end
  end
end
