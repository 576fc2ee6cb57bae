-- floodgate's token_bucket and leaky_bucket on Redis: GCRA, one key, one
-- integer. The key holds the theoretical arrival time (TAT) in microseconds
-- of Redis's own clock: the instant at which the bucket is full again. A
-- request of cost n is allowed if and only if max(TAT, now) + n * interval
-- lies at most tau = capacity * interval after now; then the TAT moves
-- there. A denial writes nothing. Every number is an integer below 2^53, so
-- Lua's doubles hold each one exactly.
--
-- KEYS[1]  the client's key
-- ARGV[1]  n, the cost: 1 <= n <= capacity
-- ARGV[2]  interval, microseconds per token: >= 1
-- ARGV[3]  capacity, the burst: >= 1, capacity * interval <= 2^50
-- ARGV[4]  margin, milliseconds added to every key's TTL: >= 0
-- ARGV[5]  dry: 1 answers as a cost-1 request would and writes nothing
--
-- Returns {allowed, remaining, retry_after, reset_after}, the two waits in
-- microseconds.

local function arg(i, name, lo, hi)
  local x = tonumber(ARGV[i])
  -- x ~= x is NaN; the floor test rejects fractions and infinities
  if x == nil or x ~= x or x < lo or x > hi or math.floor(x) ~= x then
    return nil, redis.error_reply('floodgate: ' .. name .. ' must be an integer in [' ..
      string.format('%d', lo) .. ', ' .. string.format('%d', hi) .. '], got ' .. tostring(ARGV[i]))
  end
  return x
end

local MAX = 2^50
local interval, e1 = arg(2, 'interval', 1, MAX)
if not interval then return e1 end
local capacity, e2 = arg(3, 'capacity', 1, math.floor(MAX / interval))
if not capacity then return e2 end
local n, e3 = arg(1, 'n', 1, capacity)
if not n then return e3 end
local margin, e4 = arg(4, 'margin', 0, 2^40)
if not margin then return e4 end
local dry, e5 = arg(5, 'dry', 0, 1)
if not dry then return e5 end

local now
do -- clock
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end -- clock

local tau = capacity * interval
local stored = redis.call('GET', KEYS[1])
local tat = now -- no key: the bucket is full
if stored then
  tat = tonumber(stored)
  if tat == nil or tat ~= tat or math.floor(tat) ~= tat or math.abs(tat) > 2^52 then
    return redis.error_reply('floodgate: key ' .. KEYS[1] .. ' holds no TAT')
  end
end

-- floor(a / b) for integers 0 <= a < 2^53, b >= 1, corrected in integers.
local function quo(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local w = math.max(tat, now)
local next = w + n * interval
local allowed = next - now <= tau
local debt, retry = w - now, 0
if allowed then
  debt = next - now
  if dry == 0 then
    local ttl = math.floor((debt + 999) / 1000) + margin
    redis.call('SET', KEYS[1], string.format('%d', next), 'PX', string.format('%d', ttl))
  end
else
  retry = debt + n * interval - tau
end
local remaining = 0
if debt < tau then remaining = quo(tau - debt, interval) end
return {allowed and 1 or 0, remaining, retry, debt}
