-- ARGV: one layout for the three scripts (gcra.lua, window.lua, log.lua),
-- read and checked by this block, which the Limiter puts in each script
-- at the place it marks for it. Each script says what its kind makes of the
-- fields, and checks them all before it reads or writes the key: a bad
-- one is an error reply that lists them.
--
-- KEYS[1]   the client's key
-- ARGV[1]   n, the cost: 1 <= n <= capacity; or 0, with dry = 0 and
--           give >= 1 or want >= 1: a return, or a lease, alone
-- ARGV[2]   dry: 1 answers as the request would and writes nothing; 2
--           forces the charge: n (1 <= n, past capacity too) is taken
--           whatever the key holds, so that it may owe, unless that would
--           pass what the key can owe (each kind's bound), when the reply's
--           allowed is -1 and nothing is written; 3 answers as 2 would and
--           writes nothing
-- ARGV[3]   want: lease mode's extra units, 0 <= want <= 2^50
-- ARGV[4]   give: unspent leased units returned, 0 <= give <= capacity
-- ARGV[5]   gk: where the returned units were charged, as the kind says
-- ARGV[6]   now: the call's instant, µs of Redis's clock, 0 <= now <=
--           2^52; or TIME (-1), which has the script read Redis's own
--           clock (the TIME command). Production always sends TIME; tests
--           send the reading of a manual clock.
-- ARGV[7]   kind: BUCKET, FIXED_WINDOW, SLIDING_COUNTER or SLIDING_LOG
-- ARGV[8]   interval: µs per token (BUCKET), or the window, T (the others)
-- ARGV[9]   capacity: the burst (BUCKET), or the limit per window, N
-- ARGV[10]  margin: milliseconds added to every key's TTL, 0..2^40
-- ARGV[11]  param: SLIDING_LOG's hold; 0 for the other kinds
-- ARGV[12]  on: the rule's history, if any, in (interval, capacity, end)
--           triples (see history.lua)
--
-- Or the short form, exactly four: n, kind, interval, capacity, for a
-- plain request (dry, want, give, gk 0) on Redis's clock (now TIME),
-- with margin 1000, param 0 and no history; on is then 5. A fifth, dry,
-- makes it a forced charge (2); on is then 6.
local BUCKET, FIXED_WINDOW, SLIDING_COUNTER, SLIDING_LOG = 0, 1, 2, 3
local TIME = -1
local num, A = tonumber, ARGV -- as locals: a global costs a lookup each time
-- tonumber parses with the C library's strtod, about a thousand
-- instructions a field. The values production sends on every call are
-- known strings, and Lua's strings are interned, so comparing with one is
-- comparing two pointers: each such field is read so, and tonumber reads
-- the rest. The values are tonumber's either way.
local n, dry, want, give, gk, now, kind, interval, capacity, margin, param
local on = 12
if #A == 4 or #A == 5 then
  -- The short form, of the common call: a plain request (dry, want, give
  -- and gk 0) on Redis's clock (now TIME), with the default margin (1000)
  -- and no param nor history: ARGV is n, kind, interval, capacity. Redis
  -- spends about a thousand instructions on each argument it hands a
  -- script, so the seven it need not send are a tenth of the call.
  n, kind, interval, capacity = A[1] == '1' and 1 or num(A[1]), A[2] == '0' and 0 or num(A[2]), num(A[3]), num(A[4])
  dry, want, give, gk, now, margin, param, on = 0, 0, 0, 0, TIME, 1000, 0, #A + 1
  if #A == 5 then dry = num(A[5]) end
else
  n, dry, want, give, gk, now, kind, interval, capacity, margin, param =
    A[1] == '1' and 1 or num(A[1]), A[2] == '0' and 0 or num(A[2]),
    A[3] == '0' and 0 or num(A[3]), A[4] == '0' and 0 or num(A[4]), A[5] == '0' and 0 or num(A[5]),
    A[6] == '-1' and TIME or num(A[6]), A[7] == '0' and 0 or num(A[7]), num(A[8]), num(A[9]),
    A[10] == '1000' and 1000 or num(A[10]), A[11] == '0' and 0 or num(A[11])
end
-- The checks of every kind, in one expression, for speed: nil (not a
-- number), NaN (every comparison is false), a fraction or an infinity
-- (x % 1 is not 0), or out of range. Each script adds its kind's, then
-- reads Redis's clock if now is TIME.
local argsOK = n and n >= 0 and n % 1 == 0
  and (dry == 0 or dry == 1 or dry == 2 or dry == 3)
  and want and want >= 0 and want <= 2^50 and want % 1 == 0
  and give and give >= 0 and give % 1 == 0
  and gk and gk % 1 == 0
  and now and (now == TIME or (now >= 0 and now <= 2^52 and now % 1 == 0))
  and interval and interval % 1 == 0
  and capacity and capacity % 1 == 0
  and margin and margin >= 0 and margin <= 2^40 and margin % 1 == 0
  and param and param % 1 == 0
  and (n >= 1 or (dry == 0 and (give >= 1 or want >= 1)))
  and (dry == 0 or dry == 1 or (want == 0 and give == 0 and n >= 1 and n <= 2^52))
-- force: a charge that cannot be refused (dry 2, or 3 to answer as it
-- would; see ARGV[2]); write: the call may write the key.
local force, write = dry == 2 or dry == 3, dry == 0 or dry == 2
-- BAD begins the reply to arguments the script cannot take, which lists
-- them after it.
local BAD = 'floodgate: bad arguments (n, dry, want, give, gk, now, kind, interval, capacity, margin, param): '
if on <= 6 then BAD = 'floodgate: bad arguments (n, kind, interval, capacity[, dry]): ' end
