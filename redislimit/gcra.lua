-- floodgate's token_bucket and leaky_bucket on Redis: GCRA, one key. The
-- key holds the theoretical arrival time (TAT) in microseconds of Redis's
-- own clock, the instant at which the bucket is full again. A request of
-- cost n is allowed if and only if max(TAT, now) + n * interval lies at
-- most tau = capacity * interval after now; then the TAT moves there. A
-- denial writes nothing. Every number is an integer below 2^53, so Lua's
-- doubles hold each one exactly.
--
-- The value is 32 bytes, four little-endian int64s (struct.pack costs
-- less than decimal): the TAT; w, the instant it was written at; and the
-- rule it was written under, interval and capacity. The rule and w say
-- how to read the TAT after a rule change (see "Rule changes" below).
--
-- Lease mode adds credits: units a replica leased and gave back unspent.
-- The TAT moves back for them, whole, only if they are its last slots (no lease
-- was taken since); otherwise later leases of other replicas lie after
-- them, and they are kept beside the TAT instead, as groups of a count and
-- the end of the slots they held, after the key's 32 bytes (16 bytes per
-- group; at most 8 groups, the two that lose least merging beyond). A
-- credited unit is the slot of one request already accounted for in the
-- TAT, so spending it is exactly what the replica that leased it could
-- have done: while its group's end is at least a
-- step per unit ahead (after that Redis has taken the slot back by
-- itself). Requests take valid credits before the TAT, the soonest to
-- lapse first.
--
-- Rule changes. A call carries, after its fixed arguments, the history
-- of the rule its Limiter changed from: (interval, capacity, end)
-- triples, oldest first, each the rule in force until end (µs of Redis's
-- clock), the last one's end the instant of the latest change; none if
-- the rule never changed or every key written before the changes has
-- expired. A first triple with interval 0 is a history cut short: of a
-- key written before its end, nothing is known, and it is read as holding
-- nothing then. A key written under another rule than the call's is read
-- by the rule that w falls under in the history:
--
--   - the key's own rule: the key converts at each change since, in
--     order: at the instant x of a change (never after now) it holds
--     min(what it held at x, the next rule's capacity), in whole tokens
--     and the fraction of one, or owes what it owed, and refills at the
--     next rule's rate;
--   - another rule, the key's being the call's: the key is read as it
--     stands (another replica wrote it under the rule in force now);
--   - else (a replica that runs another rule wrote it): it converts once,
--     at now, to min(what it holds now, the call's capacity), or owes
--     what it owes now.
--
-- A conversion never adds to what a key holds, and drops its credits (the
-- returned units of lease mode: they were reckoned under the old rule).
-- A key converted by a call is written converted, even by a denial.
--
-- The arguments (the layout in args.lua, shared by the three scripts), as this
-- script reads them:
--
--   - kind is BUCKET; interval, microseconds per token, >= 1; capacity,
--     the burst, >= 1, with capacity * interval <= 2^50; param is 0.
--   - want: when the request is allowed (and not dry), it also takes
--     extra = min(want, floor(r / 8)) units from the TAT, r being what
--     remains after the request: the TAT moves by extra steps more,
--     exactly as extra more requests would move it. The last 8 units go
--     one at a time.
--   - give is applied first, as credits; gk is the end of the returned
--     units' slots, the TAT that the call which leased them left (its
--     reply's now + horizon), -2^52 <= gk <= 2^52.
--   - the history: see "Rule changes". A return or a lease alone (n = 0)
--     on a key written under another rule does nothing.
--
-- Returns {allowed, remaining, retry_after, reset_after, extra, horizon,
-- now}: the waits in microseconds; extra the units leased; horizon the
-- debt after the call (TAT - now): unit by unit, a lease stays spendable
-- while the debt it created is unpaid; now, Redis's clock. remaining
-- excludes the leased units and includes the credits; it is negative
-- when the key owes: minus the whole units owed, ceil((TAT - now - tau) /
-- interval) less the credits, which pay a debt as they pay a request.
-- A forced charge (dry 2) may put the TAT past now + tau, up
-- to 2^52; past that its allowed is -1, and it writes nothing.

--[[args]]
-- This kind's checks, with argsOK's; then the clock.
if not (argsOK and kind == BUCKET
    and interval >= 1 and capacity >= 1 and capacity * interval <= 2^50
    and (n <= capacity or force) and give <= capacity
    and gk >= -2^52 and gk <= 2^52
    and param == 0) then
  local a = {}
  for i = 1, on - 1 do a[i] = tostring(A[i]) end
  return redis.error_reply(BAD .. table.concat(a, ', '))
end
local gtop = gk
if now == TIME then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local stored = redis.call('GET', KEYS[1])

-- The common case, the fast path: no history, no lease (want = give = 0,
-- so n >= 1), and no key, or a key of the call's rule with no credits;
-- a forced charge too, when it fits.
-- What follows decides it as the general path would: with no history, a
-- key of the call's rule is read as it stands (see changes), and with no
-- credits and nothing given, a request moves the TAT alone. It defines no
-- function and builds no table but the reply (closures and tables are
-- allocations, and work for the collector); any other key, a valid one or
-- not, is the general path's.
if want == 0 and give == 0 and #A < on then
  local tat, w, si, sc = now, now, interval, capacity
  if stored and #stored == 32 then tat, w, si, sc = struct.unpack('<i8i8i8i8', stored) end
  if not stored or (#stored == 32 and si == interval and sc == capacity
      and tat >= -2^52 and tat <= 2^52 and w >= 0 and w <= 2^52) then
    local tau = capacity * interval
    local debt = math.max(tat, now) - now
    local next = debt + n * interval -- the TAT after the request, less now
    -- A forced charge that leaves a unit is a request that fits; one that
    -- leaves none (its answer has a wait) or a debt is the general path's.
    if not force or next + interval <= tau then
      local retry = 0
      if next <= tau then
        debt = next
        if write then
          -- next >= 1: the key never becomes full here, so it is written.
          redis.call('SET', KEYS[1], struct.pack('<i8i8i8i8', now + next, now, interval, capacity),
            'PX', string.format('%d', math.floor((next + 999) / 1000) + margin))
        end
      else
        retry = next - tau
      end
      local left = math.floor((tau - debt) / interval) -- negative: what is owed
      return {next <= tau and 1 or 0, left, retry, debt, 0, debt, now}
    end
  end
end

-- floor of a quotient of integers below 2^53 is exact in doubles: the
-- rounded quotient cannot reach the next integer.
local floor = math.floor

-- A rule the script can hold: the history's and the key's are checked so.
local function okRule(I, C)
  return I >= 1 and I % 1 == 0 and C >= 1 and C % 1 == 0 and C * I <= 2^50
end

local tau = capacity * interval
local MAXG = 8 -- credit groups kept apart; beyond, the two that lose least merge
local function bad() return redis.error_reply('floodgate: key ' .. KEYS[1] .. ' holds no TAT') end
local tat = now -- no key: the bucket is full, no credits
local w, si, sc -- when the key was written, and under which rule
local groups = {} -- credits: {count, end of their slots}, by end
if stored and #stored == 32 then -- the common case, and the fast one: no credits
  tat, w, si, sc = struct.unpack('<i8i8i8i8', stored)
  if not (tat >= -2^52 and tat <= 2^52 and w >= 0 and w <= 2^52 and okRule(si, sc)) then return bad() end
elseif stored then
  local k = (#stored - 32) / 16
  if #stored < 32 or k % 1 ~= 0 or k > MAXG then return bad() end
  local v = {struct.unpack('<i8i8i8i8' .. string.rep('i8i8', k), stored)}
  tat, w, si, sc = v[1], v[2], v[3], v[4]
  if not (tat >= -2^52 and tat <= 2^52 and w >= 0 and w <= 2^52 and okRule(si, sc)) then return bad() end
  for i = 1, k do
    local c, t = v[3 + 2 * i], v[4 + 2 * i]
    if not (c >= 0 and c <= sc and t <= tat and (i == 1 or t >= groups[i - 1][2])) then return bad() end
    groups[i] = {c, t}
  end
end

-- convertAt converts the TAT from rule (I, C) to (I2, C2) at x: the
-- bucket keeps min(what it holds at x, C2) tokens, and the fraction of
-- one it is refilling (dropped if scaling it would not be exact); a key
-- that owes at x owes as many tokens under (I2, C2), and the fraction of
-- one (rounded up to a whole one if scaling it would not be exact), as
-- the in-process bucket converts a debt; the TAT stays within 2^52.
local function convertAt(x, I, C, I2, C2)
  local a = C * I - math.max(tat - x, 0) -- µs of allowance held; below 0, owed
  if a < 0 then
    local owed = floor(-a / I)
    local frac = -a - owed * I
    local d = owed * I2
    if frac > 0 then
      if frac * I2 < 2^53 then
        local f = floor(frac * I2 / I)
        if f * I < frac * I2 then f = f + 1 end
        d = d + f
      else
        d = d + I2
      end
    end
    tat = math.min(x + C2 * I2 + d, 2^52)
    return
  end
  local tokens = floor(a / I)
  local a2 = C2 * I2
  if tokens < C2 then
    a2 = tokens * I2
    local frac = a - tokens * I
    if frac > 0 and frac * I2 < 2^53 then a2 = a2 + floor(frac * I2 / I) end
  end
  tat = x + C2 * I2 - a2
end
-- emptyAt is a bucket of rule (I2, C2) that holds nothing at x.
local function emptyAt(x, I2, C2) tat = x + C2 * I2 end

--[[history]]

local converted = false
if stored then
  local i = changes(w, si, sc, interval, capacity)
  if i then
    -- A return or a lease alone belongs to the rule it was sent under:
    -- on a key of another, it does nothing.
    if n == 0 then return {1, 0, 0, 0, 0, 0, now} end
    convert(i, si, sc, interval, capacity, convertAt, emptyAt)
    groups, converted, give = {}, true, 0
  end
end

-- valid credits: those whose slot Redis has not yet taken back.
local function valid(c, top)
  if c <= 0 or top <= now then return 0 end
  return math.min(c, floor((top - now) / interval))
end
-- Each group holds only its valid credits; an empty one goes.
local cr = 0
if #groups > 0 then
  local kept = {}
  for _, g in ipairs(groups) do
    local c = valid(g[1], g[2])
    if c > 0 then
      kept[#kept + 1] = {c, g[2]}
      cr = cr + c
    end
  end
  groups = kept
end

local changed = converted and write
if give > 0 and stored and tat > now then
  local top = math.min(gtop, tat)
  local g = valid(give, top)
  if gtop == tat and (#groups == 0 or groups[#groups][2] <= tat - give * interval) then
    -- The returned units are the last slots of the TAT, nobody's since:
    -- they leave it whole, as if never taken, the slot under way
    -- included (a refund of a request just charged; a lease gives back
    -- no more than its slots still ahead).
    changed = true
    tat = tat - give * interval
  elseif g > 0 then
    changed = true
    do
      local i = #groups + 1
      while i > 1 and groups[i - 1][2] > top do
        groups[i] = groups[i - 1]
        i = i - 1
      end
      groups[i] = {g, top}
      cr = cr + g
      if #groups > MAXG then
        -- Two neighbours (c1, t1) and (c2, t2), t1 <= t2, merge into
        -- (c1 + c2, min(t2, t1 + c2 * interval)): at no later instant
        -- more than the two hold apart (while the earlier runs out, the
        -- later still holds c2; after, the merged end is no later than
        -- t2). Of the pairs, the one that keeps the most now merges.
        local best, keep, into
        for j = 1, #groups - 1 do
          local c1, t1, c2, t2 = groups[j][1], groups[j][2], groups[j + 1][1], groups[j + 1][2]
          local t = math.min(t2, t1 + c2 * interval)
          local c = valid(c1 + c2, t)
          if not best or c1 + c2 - c < best then best, keep, into = c1 + c2 - c, j, {c, t} end
        end
        cr = cr - best
        table.remove(groups, keep + 1)
        groups[keep] = into
      end
    end
  end
end

-- take spends c credits, the soonest to lapse first.
local function take(c)
  while c > 0 do
    local g = groups[1]
    local t = math.min(c, g[1])
    g[1], c, cr = g[1] - t, c - t, cr - t
    if g[1] == 0 then table.remove(groups, 1) end
  end
end

-- save writes the state, or forgets the key when the bucket is full.
local function save(t)
  if t <= now then
    redis.call('DEL', KEYS[1])
    return
  end
  local ttl = string.format('%d', math.floor((t - now + 999) / 1000) + margin)
  if #groups == 0 then
    redis.call('SET', KEYS[1], struct.pack('<i8i8i8i8', t, now, interval, capacity), 'PX', ttl)
    return
  end
  local v = {t, now, interval, capacity}
  for _, g in ipairs(groups) do
    v[#v + 1], v[#v + 2] = g[1], g[2]
  end
  redis.call('SET', KEYS[1], struct.pack('<i8i8i8i8' .. string.rep('i8i8', #groups), unpack(v)), 'PX', ttl)
end

-- left is what remains at debt (TAT - now): negative, the whole units
-- owed, past tau, as the in-process bucket's Owed.
local function left(debt)
  return floor((tau - debt) / interval)
end

if n == 0 and want == 0 then
  if changed then save(tat) end
  local debt = math.max(tat - now, 0)
  return {1, left(debt) + cr, 0, debt, 0, debt, now}
end

-- The request takes valid credits first, then the TAT: m more steps.
local c = math.min(n, cr)
local m = n - c
local w = math.max(tat, now)
if force and (m > floor(2^52 / interval) or w + m * interval > 2^52) then
  -- Past what the TAT can hold: nothing is charged.
  if changed then save(tat) end
  return {-1, left(w - now) + cr, 0, w - now, 0, w - now, now}
end
local next = w + m * interval
-- The credits left after the request count against its debt, as the TAT
-- they were given back from would stand without them: a valid credit's
-- slot is still ahead, so the TAT less every valid credit is not behind
-- now, and a key in debt that was given back units owes that much less.
-- (m > 0 takes every credit.)
local over = next - now - (cr - c) * interval
local allowed = force or over <= tau
local debt, retry, extra, rest = w - now, 0, 0, cr
if allowed then
  if m > 0 then debt = next - now end
  rest = cr - c
  if force then retry = math.max(0, debt + (1 - rest) * interval - tau) end -- until a request of 1 passes
  if write then
    take(c)
    if want > 0 then
      extra = math.min(want, floor(math.max(0, left(debt)) / 8))
      next = next + extra * interval
      debt = debt + extra * interval
    end
    if m > 0 or extra > 0 or changed or c > 0 then save(math.max(next, tat)) end
  end
else
  retry = over - tau
  if changed then save(tat) end
end
return {allowed and 1 or 0, left(debt) + rest, retry, debt, extra, debt, now}
