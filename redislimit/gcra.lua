-- floodgate's token_bucket and leaky_bucket on Redis: GCRA, one key, one
-- integer. The key holds the theoretical arrival time (TAT) in microseconds
-- of Redis's own clock, the instant at which the bucket is full again, as
-- 8 bytes (a little-endian int64: struct.pack costs less than decimal). A
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

local n, interval, capacity, margin, dry =
  tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- One expression, for speed: nil (not a number), NaN (every comparison is
-- false), a fraction or an infinity (x % 1 is not 0), or out of range.
if not (interval and interval >= 1 and interval % 1 == 0
    and capacity and capacity >= 1 and capacity % 1 == 0 and capacity * interval <= 2^50
    and n and n >= 1 and n <= capacity and n % 1 == 0
    and margin and margin >= 0 and margin <= 2^40 and margin % 1 == 0
    and (dry == 0 or dry == 1)) then
  return redis.error_reply('floodgate: bad arguments (n, interval, capacity, margin, dry): ' ..
    table.concat({tostring(ARGV[1]), tostring(ARGV[2]), tostring(ARGV[3]), tostring(ARGV[4]), tostring(ARGV[5])}, ', '))
end

local now
do -- clock
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end -- clock

local tau = capacity * interval
local stored = redis.call('GET', KEYS[1])
local tat = now -- no key: the bucket is full
if stored then
  tat = #stored == 8 and struct.unpack('<i8', stored)
  if not (tat and tat >= -2^52 and tat <= 2^52) then
    return redis.error_reply('floodgate: key ' .. KEYS[1] .. ' holds no TAT')
  end
end

local w = math.max(tat, now)
local next = w + n * interval
local allowed = next - now <= tau
local debt, retry = w - now, 0
if allowed then
  debt = next - now
  if dry == 0 then
    local ttl = math.floor((debt + 999) / 1000) + margin
    redis.call('SET', KEYS[1], struct.pack('<i8', next), 'PX', string.format('%d', ttl))
  end
else
  retry = debt + n * interval - tau
end
local remaining = 0
-- floor of a quotient of integers below 2^53 is exact in doubles: the
-- rounded quotient cannot reach the next integer.
if debt < tau then remaining = math.floor((tau - debt) / interval) end
return {allowed and 1 or 0, remaining, retry, debt}
