-- floodgate's fixed_window and sliding_counter on Redis, at microsecond
-- resolution on Redis's own clock. The key holds w, curr, prev, T and N,
-- as 40 bytes (five little-endian int64s): the instant the window last
-- charged was written at, whose index is k = floor(w / T), that window's
-- admitted cost, the one before's, and the rule they were written under.
-- With e = now - k*T, a request of cost n is
-- allowed if and only if curr + n <= N and, for the sliding counter,
-- prev * (T - e) + (curr + n) * T <= N * T. A denial writes nothing. These
-- are the in-process definitions (floodgate/shardedlog) with 1 µs for 1 ns;
-- every product is checked to stay below 2^53, where Lua's doubles are
-- exact integers.
--
-- The arguments (the layout in args.lua, shared by the three scripts), as this
-- script reads them:
--
--   - kind is FIXED_WINDOW or SLIDING_COUNTER; interval is T, the window
--     in microseconds, 1 <= T <= 2^50; capacity is N, the limit per
--     window, 1 <= N <= 2^50 (sliding: N * T <= 2^52); param is 0.
--   - want: when the request is allowed (and not dry), it also charges
--     extra = min(want, floor(r / 8)) units to this window, r being what
--     remains after the request: exactly as extra more requests would.
--     The last 8 units go one at a time.
--   - give is applied first, to the window the units were charged to,
--     gk, its index (-2^52 <= gk <= 2^52): its count drops by give (not
--     below 0) while the key still holds it, as the current window or,
--     for the sliding counter, the previous one.
--   - the history, as in gcra.lua ("Rule changes"), of (T, N, end)
--     triples. A key written under another rule converts: at an instant
--     x, what it holds is the largest cost a request at x could take (0
--     if x lies in a window before the key's own); it moves to the next
--     rule's window of x, with min(that, the next N) left in it and no
--     previous window's count, or, if it owed at x, with what it owed
--     counted beyond the next N. A return or a lease alone on such a key
--     does nothing; any other call writes the key converted.
--
-- Returns {allowed, remaining, retry_after, reset_after, extra, horizon,
-- k}: the waits in microseconds, retry_after -1 for a wait too long to
-- represent; extra the units leased; horizon the microseconds left in
-- this window, the only one the lease may be spent in; k its index.
-- remaining excludes the leased units; it is negative when the key owes:
-- minus what the count (with the previous window's share) stands above
-- N. A forced charge (dry 2) may count past N, up to 2^50 (the sliding
-- counter: while the count times T stays at most 2^52); past that its
-- allowed is -1, and it writes nothing.

--[[args]]
-- This kind's checks, with argsOK's; then the clock.
local T, N = interval, capacity
local sliding = kind == SLIDING_COUNTER
if not (argsOK and (kind == FIXED_WINDOW or sliding)
    and T >= 1 and T <= 2^50
    and N >= 1 and N <= 2^50 and (not sliding or N * T <= 2^52)
    and (n <= N or force) and give <= N
    and gk >= -2^52 and gk <= 2^52
    and param == 0) then
  local a = {}
  for i = 1, on - 1 do a[i] = tostring(A[i]) end
  return redis.error_reply(BAD .. table.concat(a, ', '))
end
local MAX = 2^52
if now == TIME then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- floor(a / b) for integers 0 <= a < 2^53 and b >= 1 is exact in doubles:
-- the rounded quotient cannot reach the next integer.
local floor = math.floor
local k = floor(now / T)
local e = now - k * T
local FMT = '<i8i8i8i8i8'
local stored = redis.call('GET', KEYS[1])

-- The common case, the fast path: no history, no lease (want = give = 0,
-- so n >= 1), no key or a key of the call's rule in this window or an
-- earlier one, and a request that fits (a forced charge that fits is one). What follows decides it as the
-- general path would (with no history, a key of the call's rule is read as
-- it stands; see changes), defining no function and building no table but
-- the reply (closures and tables are allocations, and work for the
-- collector). Anything else, a denial included, is the general path's.
if want == 0 and give == 0 and #A < on then
  local ws, curr, prev, sT, sN = now, 0, 0, T, N
  if stored and #stored == 40 then ws, curr, prev, sT, sN = struct.unpack(FMT, stored) end
  local ks = floor(ws / T)
  if (not stored or (#stored == 40 and sT == T and sN == N and ws >= 0 and ws <= MAX
      and curr >= 0 and curr <= N and prev >= 0 and prev <= N)) and k >= ks then
    if k == ks + 1 and sliding then
      curr, prev = 0, curr
    elseif k ~= ks then
      curr, prev = 0, 0
    end
    curr = curr + n
    if curr <= N and (not sliding or prev == 0 or prev * (T - e) + curr * T <= N * T) then
      local remaining, reset = N - curr, T - e
      if sliding then
        reset = 2 * T - e
        if prev > 0 then
          local a = prev * (T - e) -- the previous window's share, ceil(a / T)
          local q = floor(a / T)
          if q * T < a then q = q + 1 end
          remaining = math.max(0, remaining - q)
        end
      end
      -- A forced charge that leaves a unit is a request that fits; one
      -- that leaves none (its answer has a wait) is the general path's.
      if not force or remaining > 0 then
        if write then
          redis.call('SET', KEYS[1], struct.pack(FMT, now, curr, prev, T, N), 'PX',
            string.format('%d', floor((reset + 999) / 1000) + margin)) -- reset: until nothing it holds counts
        end
        return {1, remaining, 0, reset, 0, T - e, k}
      end
    end
  end
end

-- A rule the script can hold: the history's and the key's are checked so.
local function okRule(T_, N_)
  return T_ >= 1 and T_ <= 2^50 and T_ % 1 == 0 and N_ >= 1 and N_ <= 2^50 and N_ % 1 == 0 and (not sliding or N_ * T_ <= 2^52)
end
-- cmax is the most a window of rule (T_, N_) can count, a debt included:
-- 2^50, or for the sliding counter what keeps its products below 2^52.
local function cmax(T_, N_)
  if sliding then return floor(2^52 / T_) end
  return 2^50
end

local ks, ws, curr, prev = k, now, 0, 0
local sT, sN -- the key's rule
if stored then
  if #stored ~= 40 then return redis.error_reply('floodgate: key ' .. KEYS[1] .. ' holds no window') end
  ws, curr, prev, sT, sN = struct.unpack(FMT, stored)
  if not (ws >= 0 and ws <= MAX and okRule(sT, sN) and curr >= 0 and curr <= cmax(sT, sN) and prev >= 0 and prev <= cmax(sT, sN)) then
    return redis.error_reply('floodgate: key ' .. KEYS[1] .. ' holds no window')
  end
  ks = floor(ws / sT)
end

-- heldAt is the largest cost a request at x could take from the key, of
-- rule (T_, N_): 0 if x lies in a window before the key's own.
local function heldAt(x, T_, N_)
  local kx = floor(x / T_)
  if kx < ks then return 0 end
  local c, p = curr, prev
  if kx == ks + 1 then c, p = 0, c elseif kx > ks then c, p = 0, 0 end
  if not sliding or p == 0 then return math.max(0, N_ - c) end
  return math.max(0, math.min(N_ - c, floor((N_ * T_ - p * (T_ - (x - kx * T_))) / T_) - c))
end
-- owedAt is what the key, of rule (T_, N_), owes at x: what the count
-- (with the previous window's share) stands above N_ in the window of x,
-- or at the start of the key's own if x lies in one before it.
local function owedAt(x, T_, N_)
  local kx = floor(x / T_)
  local c, p, off = curr, prev, x - kx * T_
  if kx < ks then off = 0
  elseif kx == ks + 1 then c, p = 0, c
  elseif kx > ks then c, p = 0, 0 end
  local w = 0
  if sliding and p > 0 then
    local a = p * (T_ - off)
    w = floor(a / T_)
    if w * T_ < a then w = w + 1 end
  end
  return math.max(0, c + w - N_)
end
-- convertAt moves the key from rule (T1, N1) to (T2, N2) at x: to the new
-- window of x, holding min(what it held at x, N2 minus what it had
-- spent): a lower limit takes its difference from what the key held. A
-- key that owes at x owes as much there, as far as the window can count.
local function convertAt(x, T1, N1, T2, N2)
  local h = math.max(0, heldAt(x, T1, N1) - math.max(0, N1 - N2))
  local o = math.min(owedAt(x, T1, N1), cmax(T2, N2) - N2)
  ks, ws, curr, prev = floor(x / T2), x, N2 - math.min(h, N2) + o, 0
end
-- emptyAt is a key of rule (T2, N2) that holds nothing at x.
local function emptyAt(x, T2, N2)
  ks, ws, curr, prev = floor(x / T2), x, N2, 0
end

--[[history]]

local converted = false
if stored then
  local i = changes(ws, sT, sN, T, N)
  if i then
    -- A return or a lease alone belongs to the rule it was sent under:
    -- on a key of another, it does nothing.
    if n == 0 then return {1, 0, 0, 0, 0, 0, k} end
    convert(i, sT, sN, T, N, convertAt, emptyAt)
    converted, give = true, 0
  end
end

local function fits(c, p, off)
  if c + n > N then return false end
  if not sliding or p == 0 then return true end
  return p * (T - off) + (c + n) * T <= N * T
end

-- ceil(p * (T - off) / T): the previous window's share of the estimate.
local function weighted(p, off)
  if not sliding or p == 0 then return 0 end
  local a = p * (T - off)
  local q = floor(a / T)
  if q * T < a then q = q + 1 end
  return q
end

-- The shortest wait after which a request of cost n, denied at offset off
-- with counts (c, p), would pass if nothing else came.
local function retry_after(c, p, off)
  if not sliding then return T - off end
  -- Later in this window the previous one weighs less: the request fits
  -- once p * (T - off') <= (N - c - n) * T.
  if c + n <= N and p > 0 then
    local x = math.min(T, floor((N - c - n) * T / p))
    if x > 0 then return T - x - off end
  end
  -- In the next window this one's count becomes prev: it fits once
  -- c * (T - off'') <= (N - n) * T.
  local wait = T - off
  if c > 0 then
    local x = math.min(T, floor((N - n) * T / c))
    if x < T then wait = wait + T - x end
  end
  return wait
end

-- The answer for counts (c, p) at offset off: after the grant when
-- allowed, as they stand when denied.
local function answer(allowed, c, p, off)
  local remaining = N - c - weighted(p, off) -- negative: what is owed
  local reset = 0
  if c > 0 and sliding then reset = 2 * T - off
  elseif c > 0 or p > 0 then reset = T - off end
  local retry = 0
  if not allowed then retry = retry_after(c, p, off) end
  return allowed, remaining, retry, reset
end

-- A return first: the units leave the count of the window they were
-- charged to, if the key still holds it. The state keeps its TTL.
local returned = false
if give > 0 and stored then
  if ks == gk then
    curr, returned = math.max(0, curr - give), true
  elseif sliding and ks == gk + 1 then
    prev, returned = math.max(0, prev - give), true
  end
end
-- keep writes what a call that charges nothing changed: a return, with
-- the key's TTL, or a conversion, with a TTL of its own (the key goes when
-- it holds nothing).
local function keep()
  if converted then
    if curr == 0 and prev == 0 then
      redis.call('DEL', KEYS[1])
      return
    end
    local fresh = (ks + 1) * T
    if sliding then fresh = fresh + T end
    local ttl = math.max(1, floor((fresh - now + 999) / 1000) + margin)
    redis.call('SET', KEYS[1], struct.pack(FMT, ws, curr, prev, T, N), 'PX', string.format('%d', ttl))
  elseif returned then
    redis.call('SET', KEYS[1], struct.pack(FMT, ws, curr, prev, T, N), 'KEEPTTL')
  end
end
if n == 0 and want == 0 then
  keep()
  return {1, 0, 0, 0, 0, 0, k}
end

local allowed, remaining, retry, reset
local behind, ahead = force and k < ks, 0
if behind then
  -- Redis's clock stepped back into a closed window: the charge goes to
  -- the key's own, where it counts at least as long, reckoned at its
  -- start and with the waits from now, as the in-process window charges
  -- it; the key keeps the instant it was written at.
  k, e, ahead = ks, 0, ks * T - now
end
if k < ks then
  -- This reading's window is closed (Redis's clock stepped back): its
  -- count is gone, so nothing may be charged to it. Wait for the state's.
  allowed, remaining, retry, reset = answer(false, curr, prev, 0)
  local ahead = (ks - k) * T - e
  if ahead + retry > MAX then retry = -1 else retry = retry + ahead end
  if ahead + reset > MAX then reset = -1 else reset = reset + ahead end
  keep()
  return {0, remaining, retry, reset, 0, 0, k}
end
if k == ks + 1 and sliding then
  curr, prev = 0, curr
elseif k ~= ks then
  curr, prev = 0, 0
end
-- Rolled to window k, the state reads as it did: a return writes it so,
-- and its TTL, kept, still outlasts what it holds.
if ks ~= k then ks, ws = k, now end
if force and curr + n > cmax(T, N) then
  -- Past what the window can count: nothing is charged.
  keep()
  allowed, remaining, retry, reset = answer(false, curr, prev, e)
  return {-1, remaining, retry, reset, 0, T - e, k}
end
if force or fits(curr, prev, e) then
  curr = curr + n
  local extra = 0
  if dry == 0 and want > 0 then
    extra = math.min(want, floor(math.max(0, N - curr - weighted(prev, e)) / 8))
    curr = curr + extra
  end
  allowed, remaining, retry, reset = answer(true, curr, prev, e)
  if force and remaining <= 0 then
    -- The wait until a request of 1 passes.
    local cost = n
    n = 1
    retry = retry_after(curr, prev, e)
    n = cost
  end
  if ahead > 0 then
    if ahead + retry > MAX then retry = -1 else retry = retry + ahead end
    if ahead + reset > MAX then reset = -1 else reset = reset + ahead end
  end
  if write then
    local fresh = (k + 1) * T -- the instant nothing this key holds counts
    if sliding then fresh = fresh + T end
    local ttl = floor((fresh - now + 999) / 1000) + margin
    local wnow = now
    if behind then wnow = ws end
    redis.call('SET', KEYS[1], struct.pack(FMT, wnow, curr, prev, T, N), 'PX', string.format('%d', ttl))
  else
    keep()
  end
  return {1, remaining, retry, reset, extra, T - e, k}
end
-- A denial writes nothing but a return.
keep()
allowed, remaining, retry, reset = answer(false, curr, prev, e)
return {0, remaining, retry, reset, 0, T - e, k}
