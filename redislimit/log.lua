-- floodgate's sliding_log on Redis, at microsecond resolution on Redis's
-- own clock, on one key. A request of cost n at t is allowed if and only
-- if the cost admitted in (t - T, t] plus n is at most N: the in-process
-- log's definitions (floodgate/shardedlog, MutexLog) with 1 µs for 1 ns,
-- down to its Decision's Remaining, RetryAfter and ResetAfter. A request
-- is charged at c = max(t, newest), newest being the latest instant
-- charged, so that the log stays in time order when Redis's clock steps
-- back. A denial writes nothing.
--
-- The key is a string: a 32-byte header (newest int64, base, head, count
-- uint32, and the rule the log was written under, T int64 and N uint32,
-- little-endian) and a ring of cap 12-byte records, of which
-- count, from slot head on, are the log: one record per instant that
-- holds admitted cost, in time order, (stamp int64, cum uint32). cum is
-- the cost admitted up to and including the record, modulo 2^32; base is
-- the cum before the first. A record's cost is its cum minus the one
-- before, and the cost of any window a difference of two cums: the costs
-- the key holds never sum to 2^32 (N < 2^32, and a forced charge stops
-- below it), so the differences are exact.
-- A weighted cost is one record; costs charged at one instant share one.
--
-- A call reads the header and the few records it needs with GETRANGE
-- (the window's first record and RetryAfter's are found by galloping from
-- the oldest, the insertion point and a return's record from the newest)
-- and writes them with SETRANGE: besides those searches, it handles only
-- the records after the one it changes (lease mode's, stamped ahead). An
-- admission drops the records that have left every window still to come
-- (stamp <= c - T) by moving head. When the ring is full, or less than
-- half used, the admission rewrites the key, in a ring that fills the
-- string's allocation (see ring): amortized, a few record copies each.
-- MEMORY USAGE (Redis 7.0, jemalloc, with a TTL): 168 bytes for a key
-- with one entry (a ring of 2, 56 bytes); 1,384 after 100 admissions at
-- instants of their own (a ring of 103, 1,268 bytes). A call costs a dozen commands inside the script, about
-- twice the window script's time, whatever the number of entries.
--
-- Lease mode stamps a batch of units ahead, at c + hold: a unit that a
-- replica spends at any instant up to then is counted by Redis for a full
-- T after it was spent, and every window check counts such records (their
-- stamp is > t - T): exact.
--
-- The arguments (the layout in args.lua, shared by the three scripts), as this
-- script reads them:
--
--   - kind is SLIDING_LOG; interval is T, the window in microseconds,
--     1 <= T <= 2^50; capacity is N, the limit per window, 1 <= N <= 2^31;
--     param is hold, microseconds, 1 <= hold <= T.
--   - want: when the request is allowed (and not dry), it also charges
--     extra = min(want, floor(r / 8)) units, r being what remains after
--     the request, as one record stamped c + hold. The last 8 units go
--     one at a time.
--   - give is applied first: the record stamped exactly gk (a reply's k,
--     0 <= gk < 2^53), if the key holds one, loses up to give units (and
--     goes when it holds none). Nothing else changes; the key keeps its
--     TTL.
--   - the history, as in gcra.lua ("Rule changes"), of (T, N, end)
--     triples; newest stands for the instant the key was written at. A
--     key written under another rule converts: at an instant x, what it
--     holds is N minus the cost in the window where a request at x is
--     charged (records stamped ahead included); it becomes one record of
--     the cost that leaves it min(that, the next N), or that owes what
--     it owed at x, stamped at x or at its latest record, if later, so
--     that no unit leaves the window sooner than it would have. A return or a lease alone on such a key
--     does nothing; any other call writes it converted.
--
-- Returns {allowed, remaining, retry_after, reset_after, extra, horizon,
-- k}: the waits in microseconds (-1 for one too long to represent);
-- extra the units leased; horizon = hold, the microseconds for which they
-- may be spent; k = c + hold, their record's stamp. remaining excludes
-- the leased units; it is negative when the key owes: minus what the
-- window's cost stands above N. A forced charge (dry 2) may take the
-- window's cost past N, below 2^32 (the cums must tell it apart); past
-- that its allowed is -1, and it writes nothing.

--[[args]]
-- This kind's checks, with argsOK's; then the clock.
local T, N, hold = interval, capacity, param
if not (argsOK and kind == SLIDING_LOG
    and T >= 1 and T <= 2^50
    and N >= 1 and N <= 2^31
    and (n <= N or force) and give <= N
    and gk >= 0 and gk < 2^53
    and hold >= 1 and hold <= T) then
  local a = {}
  for i = 1, on - 1 do a[i] = tostring(A[i]) end
  return redis.error_reply(BAD .. table.concat(a, ', '))
end
if now == TIME then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local HDR, REC, HFMT, FMT, M = 32, 12, '<i8I4I4I4i8I4', '<i8I4', 2^32
-- Every instant stays below 2^53, where Lua's doubles are exact integers:
-- newest <= 2^52, a stamp at most newest + hold, and T more.
local MAXNEW, MAXSTAMP = 2^52, 2^52 + 2^50
local floor, max, min = math.floor, math.max, math.min
local pack, unpack = struct.pack, struct.unpack
local key = KEYS[1]
local function bad() return redis.error_reply('floodgate: key ' .. key .. ' holds no log') end

-- A rule the script can hold: the history's and the key's are checked so.
local function okRule(T_, N_)
  return T_ >= 1 and T_ <= 2^50 and T_ % 1 == 0 and N_ >= 1 and N_ <= 2^31 and N_ % 1 == 0
end

local len = redis.call('STRLEN', key)
local newest, base, head, count, cap = now, 0, 0, 0, 0
local sT, sN -- the key's rule
if len > 0 then
  if len < HDR or (len - HDR) % REC ~= 0 then return bad() end
  newest, base, head, count, sT, sN = unpack(HFMT, redis.call('GETRANGE', key, 0, HDR - 1))
  cap = (len - HDR) / REC
  if not (newest >= 0 and newest <= MAXNEW and count <= cap and (head < cap or head == 0) and okRule(sT, sN)) then return bad() end
end

-- Record i of the log, 1 <= i <= count: its stamp and cum, read once.
local memo = {}
local function at(i)
  local r = memo[i]
  if not r then
    local o = HDR + (head + i - 1) % cap * REC
    local stamp, cum = unpack(FMT, redis.call('GETRANGE', key, o, o + REC - 1))
    r = {stamp, cum}
    memo[i] = r
  end
  return r[1], r[2]
end
-- The cum before record i.
local function before(i)
  if i <= 1 then return base end
  local _, cum = at(i - 1)
  return cum
end
-- The first i in [lo, hi) for which pred(i) holds, or hi: pred is false
-- up to some record and true from it on.
local function bisect(lo, hi, pred)
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if pred(mid) then hi = mid else lo = mid + 1 end
  end
  return lo
end
-- The first i in [lo, count] for which pred(i) holds, or count + 1.
-- Galloping from lo costs O(log d) reads for an answer d records on.
local function search(lo, pred)
  local hi, step = lo, 1
  while hi <= count do
    if pred(hi) then break end
    lo, hi, step = hi + 1, hi + step, step * 2
  end
  return bisect(lo, min(hi, count + 1), pred)
end
-- search, galloping back from the newest record.
local function searchBack(lo, pred)
  local hi, probe, step = count + 1, count, 1
  while probe >= lo do
    if not pred(probe) then
      lo = probe + 1
      break
    end
    hi, probe, step = probe, probe - step, step * 2
  end
  return bisect(lo, hi, pred)
end
-- Records i..j as one string.
local function slice(i, j)
  if j < i then return '' end
  local a, b = (head + i - 1) % cap, (head + j - 1) % cap
  if a <= b then return redis.call('GETRANGE', key, HDR + a * REC, HDR + (b + 1) * REC - 1) end
  return redis.call('GETRANGE', key, HDR + a * REC, HDR + cap * REC - 1) ..
    redis.call('GETRANGE', key, HDR, HDR + (b + 1) * REC - 1)
end
-- Writes records str from record i on, within the ring.
local function put(i, str)
  if #str == 0 then return end
  local a = (head + i - 1) % cap
  local room = (cap - a) * REC
  redis.call('SETRANGE', key, HDR + a * REC, string.sub(str, 1, room))
  if #str > room then redis.call('SETRANGE', key, HDR, string.sub(str, room + 1)) end
end
-- Records as lists of stamps and costs, prev the cum before them.
local function decode(str, prev)
  local stamps, costs = {}, {}
  for pos = 1, #str, REC do
    local stamp, cum = unpack(FMT, str, pos)
    stamps[#stamps + 1], costs[#costs + 1], prev = stamp, (cum - prev) % M, cum
  end
  return stamps, costs
end
-- The lists as records, after cum; the empty ones go.
local function encode(stamps, costs, cum)
  local parts = {}
  for i = 1, #stamps do
    if costs[i] > 0 then
      cum = (cum + costs[i]) % M
      parts[#parts + 1] = pack(FMT, stamps[i], cum)
    end
  end
  return table.concat(parts)
end
-- The ring a rewrite gives a log of live records: as many records as fit
-- in the allocation of its string with one record more. Redis allocates
-- a string of l bytes as l + 4 (l < 256; 6 below 64 KiB, else 10), and
-- jemalloc rounds that up to its size class (16-byte steps to 128, then
-- four classes to a doubling): the headroom, at least an eighth, costs
-- nothing more. (A string of up to 44 bytes shares one allocation with
-- its object; no log with its header and a record to spare is so short.)
local function ring(live)
  local l = HDR + (live + 1) * REC
  local size = l + 6
  if l >= 65536 then size = l + 10 end
  local class = floor((size + 15) / 16) * 16
  if size > 128 then
    local k = 128
    while k * 2 < size do k = k * 2 end
    class = floor((size + k / 4 - 1) / (k / 4)) * (k / 4)
  end
  if class >= 65536 then return floor((class - 10 - HDR) / REC) end
  return floor((class - 6 - HDR) / REC)
end
-- Adds cost at stamp to the lists, in the record there or a new one.
local function add(stamps, costs, stamp, cost)
  local i = 1
  while i <= #stamps and stamps[i] < stamp do i = i + 1 end
  if stamps[i] == stamp then
    costs[i] = costs[i] + cost
  else
    table.insert(stamps, i, stamp)
    table.insert(costs, i, cost)
  end
end

-- The key as a rule change leaves it (see convertAt): its newest, and one
-- record (cstamp, ccost) if ccost > 0; inring while it is still the log in
-- Redis, unconverted.
local inring, cnew, cstamp, ccost = true, newest, 0, 0
-- heldAt is N_ minus the cost in the window of rule (T_, N_) where a
-- request at x is charged, records stamped ahead included: below 0, what
-- the key owes.
local function heldAt(x, T_, N_)
  local c = max(x, cnew)
  if not inring then
    if ccost > 0 and cstamp > c - T_ then return N_ - ccost end
    return N_
  end
  if count == 0 then return N_ end
  local first = search(1, function(i) return at(i) > c - T_ end)
  if first > count then return N_ end
  local _, cum = at(count)
  return N_ - (cum - before(first)) % M
end
-- latest is the latest instant at which the key holds cost, or newest.
local function latest()
  if not inring then
    if ccost > 0 then return max(cnew, cstamp) end
    return cnew
  end
  if count == 0 then return cnew end
  local stamp = at(count)
  if not (stamp >= 0 and stamp <= MAXSTAMP) then error('floodgate: key ' .. key .. ' holds no log') end
  return max(cnew, stamp)
end
-- convertAt moves the key from rule (T1, N1) to (T2, N2) at x: one record
-- of the cost that leaves it min(what it held at x, N2 minus what it had
-- spent): a lower limit takes its difference from what the key held. A
-- key that owed at x (held below 0) owes as much, as far as a record's
-- cost can go.
local function convertAt(x, T1, N1, T2, N2)
  local h = heldAt(x, T1, N1)
  if h > 0 then h = max(0, h - max(0, N1 - N2)) end
  inring, cstamp, ccost, cnew = false, max(x, latest()), min(N2 - min(h, N2), M - 1), max(x, cnew)
end
-- emptyAt is a key of rule (T2, N2) that holds nothing at x.
local function emptyAt(x, T2, N2)
  inring, cstamp, ccost, cnew = false, max(x, latest()), N2, max(x, cnew)
end

--[[history]]

if len > 0 then
  local i = changes(newest, sT, sN, T, N)
  if i then
    -- A return or a lease alone belongs to the rule it was sent under:
    -- on a key of another, it does nothing.
    if n == 0 then return {1, 0, 0, 0, 0, 0, 0} end
    convert(i, sT, sN, T, N, convertAt, emptyAt)
    give = 0
    -- Written at once, as a log of its own, which the call then reads as
    -- any other.
    if ccost == 0 then
      redis.call('DEL', key)
      len, newest, count, cap = 0, now, 0, 0
    else
      local rc = ring(1)
      local ttl = string.format('%d', floor((cstamp + T - now + 999) / 1000) + margin)
      redis.call('SET', key, pack(HFMT, cnew, 0, 0, 1, T, N) .. pack(FMT, cstamp, ccost) .. string.rep('\0', (rc - 1) * REC), 'PX', ttl)
      len, newest, count, cap = HDR + rc * REC, cnew, 1, rc
    end
    base, head, memo = 0, 0, {}
  end
end

-- A return first: the units leave the record stamped gk, if the key
-- still holds it. The key keeps its TTL.
local returned = false
if give > 0 and count > 0 then
  local j = searchBack(1, function(i) return at(i) >= gk end)
  if j <= count and at(j) == gk then
    local prev = before(j)
    local stamps, costs = decode(slice(j, count), prev)
    local g = min(give, costs[1])
    if g > 0 then
      costs[1] = costs[1] - g
      local records = encode(stamps, costs, prev)
      put(j, records)
      count = j - 1 + #records / REC
      redis.call('SETRANGE', key, 0, pack(HFMT, newest, base, head, count, T, N))
      memo, returned = {}, true
    end
  end
end
if n == 0 and want == 0 then return {1, 0, 0, 0, 0, 0, 0} end

local c = max(now, newest)
local first = search(1, function(i) return at(i) > c - T end)
local b = before(first)
local w, last = 0, newest -- the window's cost; the latest instant that holds cost
if count > 0 then
  local stamp, cum = at(count)
  if not (stamp >= 0 and stamp <= MAXSTAMP) then return bad() end
  last = max(last, stamp)
  if first <= count then w = (cum - b) % M end
end
-- The wait from now until instant x.
local function wait(x)
  if x - now > 2^52 then return -1 end
  return max(0, x - now)
end

if force and w + n >= M then
  -- Past what the records' cums can tell apart: nothing is charged.
  return {-1, N - w, 0, wait(last + T), 0, hold, c + hold}
end
if w + n <= N or force then
  local remaining, extra, retry = N - w - n, 0, 0
  if remaining <= 0 and force then
    -- The wait until a request of 1 passes: until the window's cost,
    -- from its oldest record, has shed 1 - remaining; past the records
    -- it holds, when this charge's record leaves it.
    local need = 1 - remaining
    retry = wait(c + T)
    if need <= w then
      local j = search(first, function(i)
        local _, cum = at(i)
        return (cum - b) % M >= need
      end)
      retry = wait(at(j) + T)
    end
  end
  if not write then return {1, remaining, retry, wait(max(c, last) + T), 0, hold, c + hold} end
  if want > 0 then extra = min(want, floor(max(0, remaining) / 8)) end
  -- A lease alone (n = 0) with too little left to lease writes nothing:
  -- there is no record to add, and no TTL to stretch.
  if n == 0 and extra == 0 then return {1, remaining, 0, wait(max(c, last) + T), 0, hold, c + hold} end
  -- The records from c on (lease mode's, ahead) change; those before
  -- first leave.
  local p = count + 1
  if last >= c and count > 0 then p = searchBack(first, function(i) return at(i) >= c end) end
  local prev = before(p)
  local stamps, costs = decode(slice(p, count), prev)
  if n > 0 then add(stamps, costs, c, n) end
  if extra > 0 then add(stamps, costs, c + hold, extra) end
  local records = encode(stamps, costs, prev)
  local live = p - first + #records / REC
  local ttl = string.format('%d', floor((stamps[#stamps] + T - now + 999) / 1000) + margin)
  if live > cap or (live * 2 <= cap and cap - live >= 4) then
    -- Rewritten, in a ring of its own size.
    redis.call('SET', key, pack(HFMT, c, b, 0, live, T, N) .. slice(first, p - 1) .. records ..
      string.rep('\0', (ring(live) - live) * REC), 'PX', ttl)
  else
    head = (head + first - 1) % cap
    put(p - first + 1, records)
    redis.call('SETRANGE', key, 0, pack(HFMT, c, b, head, live, T, N))
    redis.call('PEXPIRE', key, ttl)
  end
  return {1, remaining - extra, retry, wait(stamps[#stamps] + T), extra, hold, c + hold}
end

-- A denial writes nothing but a return. RetryAfter is the wait until the
-- record at which the window's cost, from its oldest, reaches the excess
-- has left it.
local need = w + n - N
local j = search(first, function(i)
  local _, cum = at(i)
  return (cum - b) % M >= need
end)
return {0, N - w, wait(at(j) + T), wait(last + T), 0, hold, c + hold}
