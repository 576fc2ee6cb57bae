-- An in-flight policy's slots of one client: KEYS[1] is a sorted set of
-- the holders of its slots, each a member named by its holder, scored by
-- when it expires (µs of Redis's clock). A holder renews its slots while
-- its work runs; a slot whose holder stopped renewing it (a replica that
-- died) is free once its expiry has passed.
--
-- ARGV[1]  op: 1 acquire, 2 release, 3 renew
-- ARGV[2]  now: µs of Redis's clock, or -1 to read it (TIME)
-- ARGV[3]  ttl: µs a slot stays held from now without a renewal
-- ARGV[4]  acquire: the limit
-- ARGV[5…] the holders' members: one or several (lease mode's slots ahead)
--
-- Acquire drops the expired holders, then adds as many of its members, in
-- order, as the limit has room for: {added, held}, so that added 0 is a
-- refusal. Release removes its members: {removed, held}. Renew answers,
-- for each member in order, 1 if the key still held it, unexpired, and
-- moves its expiry to now + ttl (only forward: GT), or 0 if not, and
-- then removes it if it had expired: a member is never renewed back from
-- expiry, as an acquisition would have dropped it. Every write keeps the
-- key's own TTL at least its last expiry, so that a client whose holders
-- all died leaves nothing behind.
local op, now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if not op or not now or not ttl or ttl < 1 then
  return redis.error_reply('floodgate: bad slot arguments')
end
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local key = KEYS[1]
local function keep()
  redis.call('PEXPIRE', key, math.ceil(ttl / 1000) + 1000)
end
if op == 1 then
  local limit = tonumber(ARGV[4])
  if not limit or limit < 1 then
    return redis.error_reply('floodgate: bad slot limit')
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local held = redis.call('ZCARD', key)
  local added = math.min(limit - held, #ARGV - 4)
  if added < 1 then
    return {0, held}
  end
  for i = 5, 4 + added do
    redis.call('ZADD', key, now + ttl, ARGV[i])
  end
  keep()
  return {added, held + added}
elseif op == 2 then
  local removed = redis.call('ZREM', key, unpack(ARGV, 5))
  return {removed, redis.call('ZCARD', key)}
end
local found, any = {}, false
for i = 5, #ARGV do
  local score = redis.call('ZSCORE', key, ARGV[i])
  if score and tonumber(score) > now then
    redis.call('ZADD', key, 'XX', 'GT', now + ttl, ARGV[i])
    found[i - 4], any = 1, true
  else
    if score then
      redis.call('ZREM', key, ARGV[i])
    end
    found[i - 4] = 0
  end
end
if any then
  keep()
end
return found
