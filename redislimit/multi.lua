-- floodgate's decision by several policies together, all or nothing, in
-- one script: the Store's Decide for a route with more than one policy.
-- The Limiter puts each kind's script before this part as a function of
-- (KEYS, ARGV): gcra, window and log, which read their own arguments (the
-- layout of args.lua) and return their own reply, exactly as they do
-- alone.
--
-- KEYS[i]  policy i's key for the client; Redis Cluster needs them all
--          in one hash slot, which the Store's keys are (one hash tag,
--          the client's).
-- ARGV[1]  now: µs of Redis's clock, or TIME (-1); every policy decides
--          at this one instant (their own now arguments are ignored).
-- ARGV[2]  a string of one character per policy: '1' for a shadow, '0'
--          for an enforced policy, '3' and '4' for a check of either (see
--          "Checks"); or all '2', a charge that cannot be refused (see
--          "Forced charges").
-- ARGV[3]  then, for each policy in turn, c, the number of its arguments
--          (at least 11), and its c arguments: the request's cost, not
--          dry, no return, and want, the units a policy leases beyond
--          the request's cost if it charges it (lease mode's batch for
--          a policy that held none: 0 for none).
--          Or the short form: 's', then for each policy its four of the
--          short form of args.lua (n, kind, interval, capacity: a plain
--          request, margin 1000, no param nor history).
--
-- The fast path: in the short form, with no shadow, every policy a
-- window (fixed or sliding) on a key of its own, each admitting as
-- window.lua's fast path admits: every key is read once and written once
-- (GET and SET), with no function called and no table built but the
-- reply; anything else is the general path's, below, which decides the
-- same. This is Envoy's rate-limit service's common request: a few
-- descriptors, each a fixed window.
--
-- A policy that refuses writes nothing (a dry run writes nothing, and
-- leases nothing: want counts only in a policy's real run), so:
--
--   - without shadows, every policy but the last runs dry; if they all
--     admit, the last decides for real, and if it admits too, the others
--     charge for real, at the same instant, on the same state, with the
--     same answer as their dry run;
--   - with shadows, every policy runs dry; if an enforced one refuses,
--     nothing is charged; else the enforced ones charge, and the shadows
--     too unless one of them refused.
--
-- Checks. A policy flagged '3' (enforced) or '4' (a shadow) is a check:
-- it runs dry, refuses as its request would (a cost of 1, as a Store's
-- Reserve sends it), and is never charged. With a check among the
-- policies, every policy runs dry first, as with shadows.
--
-- Forced charges. With flags all '2', every policy's request is a charge
-- that cannot be refused (each kind's dry 2, its own arguments' dry 0):
-- each first answers as it would (dry 3), writing nothing; if one would
-- pass what its key can owe (allowed -1), none is charged, and refused is
-- its index, every policy answering with its dry run; else every one is
-- charged, and refused is -1. The keys must be distinct.
--
-- Returns {refused, then each policy's 7 values}: refused is the index,
-- from 0, of the first enforced policy that refused (nothing was
-- charged), else of the first shadow that refused (only the enforced
-- were charged), else -1 (every policy was). A policy that charged
-- answers with its real run (its extra units leased, if it wanted), one
-- that charged nothing with its dry run. An error reply of a policy's
-- script is the reply.

local P, now, flags = #KEYS, tonumber(ARGV[1]), ARGV[2]
if not (P >= 1 and P <= 8 and now and (now == -1 or (now >= 0 and now <= 2^52 and now % 1 == 0))
    and type(flags) == 'string' and #flags == P
    and (not flags:find('[^0134]') or not flags:find('[^2]'))) then
  return redis.error_reply('floodgate: bad multi arguments: ' .. P .. ' keys, now ' .. tostring(ARGV[1]) .. ', flags ' .. tostring(flags))
end
if now == -1 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local kinds = {[0] = gcra, [1] = window, [2] = window, [3] = log}
local argvs = {}
if ARGV[3] == 's' then
  if #ARGV ~= 3 + 4 * P then
    return redis.error_reply('floodgate: bad multi arguments: ' .. #ARGV .. ' in the short form for ' .. P .. ' policies')
  end
  local floor, MAX, FMT = math.floor, 2^52, '<i8i8i8i8i8'
  local fast = not flags:find('[1-4]')
  for i = 2, P do
    for j = 1, i - 1 do
      if KEYS[i] == KEYS[j] then fast = false end
    end
  end
  if fast then
    local out, vals, ttls = {-1}, {}, {}
    for i = 1, P do
      local b = 3 + 4 * (i - 1)
      local n, kind, T, N = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
      local sliding = kind == 2
      if not ((kind == 1 or sliding) and n and T and N and n >= 1 and n % 1 == 0 and T >= 1 and T <= 2^50 and T % 1 == 0
          and N >= 1 and N <= 2^50 and N % 1 == 0 and n <= N and (not sliding or N * T <= 2^52)) then
        fast = false
        break
      end
      -- window.lua's fast path, as it stands there.
      local k = floor(now / T)
      local e = now - k * T
      local stored = redis.call('GET', KEYS[i])
      local ws, curr, prev, sT, sN = now, 0, 0, T, N
      if stored and #stored == 40 then ws, curr, prev, sT, sN = struct.unpack(FMT, stored) end
      local ks = floor(ws / T)
      if not ((not stored or (#stored == 40 and sT == T and sN == N and ws >= 0 and ws <= MAX
          and curr >= 0 and curr <= N and prev >= 0 and prev <= N)) and k >= ks) then
        fast = false
        break
      end
      if k == ks + 1 and sliding then
        curr, prev = 0, curr
      elseif k ~= ks then
        curr, prev = 0, 0
      end
      curr = curr + n
      if not (curr <= N and (not sliding or prev == 0 or prev * (T - e) + curr * T <= N * T)) then
        fast = false
        break
      end
      local remaining, reset = N - curr, T - e
      if sliding then
        reset = 2 * T - e
        if prev > 0 then
          local a = prev * (T - e)
          local q = floor(a / T)
          if q * T < a then q = q + 1 end
          remaining = math.max(0, remaining - q)
        end
      end
      vals[i] = struct.pack(FMT, now, curr, prev, T, N)
      ttls[i] = string.format('%d', floor((reset + 999) / 1000) + 1000)
      local o = 1 + (i - 1) * 7
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] = 1, remaining, 0, reset, 0, T - e, k
    end
    if fast then
      for i = 1, P do
        redis.call('SET', KEYS[i], vals[i], 'PX', ttls[i])
      end
      return out
    end
  end
  for i = 1, P do
    local b = 3 + 4 * (i - 1)
    argvs[i] = {ARGV[b + 1], 0, 0, 0, 0, now, ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], 1000, 0}
    if not kinds[tonumber(argvs[i][7])] then
      return redis.error_reply('floodgate: bad multi arguments: policy ' .. i .. ' is no plain request')
    end
  end
else
  local pos = 3
  for i = 1, P do
    local c = tonumber(ARGV[pos])
    if not (c and c >= 11 and c % 1 == 0 and pos + c <= #ARGV) then
      return redis.error_reply('floodgate: bad multi arguments: policy ' .. i .. ' has ' .. tostring(ARGV[pos]) .. ' arguments')
    end
    local a = {}
    for j = 1, c do a[j] = ARGV[pos + j] end
    a[6] = now
    if not kinds[tonumber(a[7])] or not (tonumber(a[2]) == 0 or tonumber(a[2]) == 2 and flags:find('2')) or tonumber(a[4]) ~= 0 then
      return redis.error_reply('floodgate: bad multi arguments: policy ' .. i .. ' is no plain request')
    end
    argvs[i] = a
    pos = pos + c + 1
  end
  if pos ~= #ARGV + 1 then
    return redis.error_reply('floodgate: bad multi arguments: ' .. (#ARGV - pos + 1) .. ' left over')
  end
end

local out = {-1}
-- run decides policy i, for real or dry, and keeps its answer in out;
-- force runs it as a charge that cannot be refused (dry 2), or answers
-- as that would (dry 3), and returns its allowed (1, or -1 past its
-- bound).
local function run(i, dry, force)
  local a = argvs[i]
  a[2] = dry and 1 or 0
  if force then a[2] = dry and 3 or 2 end
  local r = kinds[tonumber(a[7])]({KEYS[i]}, a)
  if type(r) == 'table' and r.err then return nil, r end
  for j = 1, 7 do out[1 + (i - 1) * 7 + j] = r[j] end
  if force then return r[1] end
  return r[1] == 1
end

if flags:find('2') then
  for i = 1, P do
    local ok, e = run(i, true, true)
    if e then return e end
    if ok == -1 then
      for j = i + 1, P do
        local _, e2 = run(j, true, true)
        if e2 then return e2 end
      end
      out[1] = i - 1
      return out
    end
  end
  for i = 1, P do
    local ok, e = run(i, false, true)
    if e then return e end
    if ok ~= 1 then return redis.error_reply('floodgate: policy ' .. i .. ' refused a charge its dry run took') end
  end
  return out
end

-- isShadow and isCheck read policy i's flag.
local function isShadow(i) local f = flags:sub(i, i) return f == '1' or f == '4' end
local function isCheck(i) local f = flags:sub(i, i) return f == '3' or f == '4' end
local last = P -- without shadows or checks, the one that decides for real first
if flags:find('[134]') then last = P + 1 end
local enforced, shadow -- the first refusals of each
for i = 1, P do
  if i ~= last then
    local ok, e = run(i, true)
    if e then return e end
    if not ok then
      if isShadow(i) then shadow = shadow or i else enforced = enforced or i end
    end
  end
end
if enforced then
  if last <= P then
    local _, e = run(last, true)
    if e then return e end
  end
  out[1] = enforced - 1
  return out
end
if last <= P then
  local ok, e = run(last, false)
  if e then return e end
  if not ok then
    out[1] = last - 1
    return out
  end
end
for i = 1, P do
  if i ~= last and not isCheck(i) and not (shadow and isShadow(i)) then
    local ok, e = run(i, false)
    if e then return e end
    if not ok then return redis.error_reply('floodgate: policy ' .. i .. ' refused what its dry run admitted') end
  end
end
if shadow then out[1] = shadow - 1 end
return out
