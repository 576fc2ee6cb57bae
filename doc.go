// Package floodgate limits the rate of requests per client: Allow(key) on
// every request, from any number of goroutines, in nanoseconds, without a
// global lock and without allocating for a key it has seen.
//
//	limiter, err := floodgate.New(floodgate.Config{
//		Rule:    floodgate.Rule{Limit: 100, Period: time.Second, Burst: 20}, // per client
//		MaxKeys: 1_000_000,                                                // bounds memory against rotating ids
//	})
//	if err != nil {
//		log.Fatal(err) // a bad rule is an error, never silently clamped
//	}
//	defer limiter.Close()
//	if !limiter.Allow(clientID) {
//		http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
//	}
//
// Sibling packages put a Limiter in front of a server (httplimit, and the
// grpclimit module), keep the same rules on Redis for many replicas (the
// redislimit module), and export the counts (the prommetrics and
// otelmetrics modules).
//
// # Guarantees
//
// Under any number of goroutines, with GOMAXPROCS above the core count:
//
//   - No over-admission. A key never passes more than its rule allows,
//     not by one request: with the token bucket, Burst + Limit × elapsed /
//     Period; with a frozen clock, exactly Burst. This holds with eviction
//     running, with callers whose clock readings reach the state out of
//     order, and across SetRule.
//   - A denial consumes nothing, and writes nothing: a flood of denials on
//     one key does not bounce its cache line between cores.
//   - With Config.Global, all keys together never pass more than the
//     global rule, and a key the cap refuses gets its own grant back.
//   - Len never exceeds Config.MaxKeys (by default a 64 MiB bound), and a
//     key evicted to make room comes back with no more than it left with.
//   - For a key already held, Allow and AllowN allocate nothing, take no
//     lock, and write nothing but the key's own state word (which shares
//     its cache line with two other keys' words).
//   - Bad input is an error, never clamped: New refuses a Limit or Period
//     that is not positive, a negative Burst, a rule an algorithm cannot
//     hold exactly, an unknown algorithm, a negative IdleTTL or MaxKeys. A
//     cost below 1 or above the capacity is a denial with RetryAfter ==
//     Never, never a panic.
//
// Every lock-free algorithm has a plain mutex twin with the same
// semantics, written apart, to which the tests hold it decision by
// decision (differential tests, fuzz targets, and a stress suite with 64
// goroutines on GOMAXPROCS ≥ 8 that counts every admission).
//
// # The token bucket, exactly
//
// Config.Algorithm defaults to TokenBucket. Each key has a bucket of
// capacity B = Burst (Limit when Burst is 0), full at first, that refills
// continuously at Limit per Period. AllowN(key, n) is allowed if and only
// if the bucket holds at least n tokens at that instant, and then exactly
// n are taken. Remaining is the whole number of tokens left after the
// decision, RetryAfter the ceiling of the wait until n tokens exist (0
// when allowed), ResetAfter the wait until the bucket is full.
//
// The state is one int64, the GCRA theoretical arrival time (TAT),
// changed by a CAS loop; the tokens at t are (tau − (TAT − t)) / interval,
// capped at B. The arithmetic is integer and exact. Where Period/Limit is
// a whole number of nanoseconds, every decision equals exact rational
// arithmetic at every nanosecond. More generally the interval is held
// exactly in ticks of 1/d ns when Period/Limit in lowest terms has a
// denominator d ≤ 8192 (3 per second, 7 per minute); otherwise it is
// rounded up to the next 1/8192 ns, so that a token may refill at most
// 1/8192 ns late, never early. A clock that moves backwards (a ManualClock
// set earlier, or goroutines whose readings arrive out of order) finds
// fewer tokens, never more.
//
// Supported rules: Limit ≥ 1, Period > 0, Burst ≥ 0, at most one token a
// nanosecond (Limit ≤ Period in nanoseconds), and a burst window B ×
// Period / Limit of at most 2^60 ticks (16 years when the interval is
// whole nanoseconds). Every rule from 1 to 1,000,000 requests per 1 ms to
// 30 days is inside. A reading may lie any distance ahead of a state's
// time origin (the origin moves, exactly, when needed) and up to 2^61
// ticks behind it (73 years for whole-nanosecond intervals); a reading
// further back is denied with Never.
//
// # Algorithms
//
// Config.Algorithm names one of the five below; there are no others.
// Each keeps the token bucket's contract: a denial consumes nothing;
// Peek, Reset, EvictIdle, MaxKeys, SetRule, the global cap with refund
// and weighted costs all work; integer arithmetic only.
//
//   - TokenBucket and LeakyBucket decide alike (both are GCRA): one atomic
//     word per key, inline in the table. Only these two can Wait.
//   - FixedWindow: windows [kT, (k+1)T) on the clock's scale; allowed if
//     and only if the window's admitted cost plus n is at most Limit. Up
//     to 2 × Limit pass across a boundary, by design.
//   - SlidingCounter: prev × (T − e) / T + curr ≤ Limit, where e is the
//     time into the current window, exact in 128-bit integers. One atomic
//     word per key.
//   - SlidingLog: exact; no interval of length Period ever holds more than
//     Limit. One 16-byte entry per admitted request (its time, index and
//     cumulative cost), published by one 16-byte CAS, in a ring that grows
//     and shrinks with the live entries. A request whose reading was
//     overtaken is charged at the newest entry's time. Lock-free on amd64
//     and arm64, served by its mutex twin elsewhere.
//
// For the windows and the log, Burst must be 0 or Limit; Limit is at most
// 8,388,606 (SlidingCounter), 4,194,302 (SlidingLog) or 2^47 − 2
// (FixedWindow). A reading from a window older than the key's state is
// denied: that window's count is no longer held.
//
// # Keys and memory
//
// A Limiter keeps its keys in a flat open-addressing table of its own,
// sharded by the key's hash, each shard behind a cache-line-padded
// header. A key is identified by a 128-bit keyed hash with random keys of
// the limiter's own; the table keeps 95 of those bits and never the key's
// bytes, about 36 bytes a key at a million keys. A bucket of the table is
// one 64-byte cache line holding three keys' identities and their state
// words, so finding a key and deciding its request touch one line.
// Readers take no lock and write nothing; adding or removing a key takes
// its shard's lock. A collision of the kept bits makes two keys share one
// allowance, stricter for both, never looser: with a million keys held
// the chance of any collision is about 10^-17.
//
// Keys are held until EvictIdle, Config.IdleTTL or Config.MaxKeys removes
// them, and both are on by default, because a client that rotates its id
// (random API keys, spoofed addresses, a fresh IPv6 /128 per request)
// adds a key per id: MaxKeys 0 is a bound that keeps a Limiter within 64
// MiB (1,048,576 keys of a bucket or a window), and IdleTTL 0 forgets a
// key that has answered as a new one for a minute, which changes no
// decision. Unbounded and Never turn them off; a negative value is an
// error. Set MaxKeys to a few times the clients you expect at once: 1M
// keys cost about 36 MB of table and 8 MB of sketch. At the bound:
//
//   - Len never exceeds it, at any instant.
//   - A new key at the bound takes the place of one held: the shard
//     samples eight keys and evicts the one that would be fresh soonest,
//     an idle one at once. Nothing scans the table.
//   - A returning client gets no fresh allowance, and sheds no debt. What
//     an evicted key held is remembered as the instant from which it would
//     have answered as a new key, in a fixed-size max-sketch (two cells a
//     key, 8 bytes per key of the bound), with what it owed beside it (8
//     bytes more per key, once a key that owes has been evicted); a key
//     created again starts from the most restrictive state that instant
//     allows, owing what it owed (see Costs known after the work).
//   - An innocent client whose cells collide with busier evicted keys
//     starts stricter, never looser, and only until the remembered
//     instants pass (at most one burst window, or one or two periods);
//     what it is told it owes is then the other key's.
//
// Eviction never orphans a grant: retiring a state is a CAS on the same
// word as every grant, a request that meets a retired state moves on to
// its successor, and a key created again after an eviction is full from
// the eviction's instant on, not before.
//
// A reservation held across a request (Reserve's, a LocalStore's Hold, a
// WaitN's while it waits) keeps its key's identity and serial, a number
// the table gives each key it creates, never the table the key was in: a
// table would keep every table that replaced it, one every few thousand
// new keys under MaxKeys, for as long as the reservation is held. What a
// held reservation keeps does not grow with the ids that come and go, and
// its settlement finds its key again, or finds that the key was removed
// and made again meanwhile, and then gives nothing back. The first such
// reservation makes the table keep the serials: 4 bytes a slot, about 8
// a key, which a Limiter that never holds one does not pay.
//
// # Waiting, several limits, changing rules
//
// Wait and WaitN reserve and then block until the request may pass, in
// the order reserved, as golang.org/x/time/rate's do; only the token and
// leaky buckets reserve (ErrCannotWait otherwise). NewLimits decides a
// request of one key against several Limiters, all or nothing ("10 a
// second and 1,000 an hour"). SetRule changes every key's rule while the
// Limiter serves, with no key gaining allowance from the change.
//
// # Costs known after the work
//
// Some costs are known only when a request ends: the tokens a model
// streamed, the bytes sent. Charge takes such a cost whatever the key
// holds, and Reserve admits an estimate that Reservation.Settle later
// corrects to the cost. A key that held less than it was charged owes
// the rest: it refuses every request until the debt is paid back, and
// every Decision says what it owes (Decision.Owed). How each algorithm
// pays it back:
//
//   - TokenBucket and LeakyBucket: at the rule's rate, as tokens refill; a
//     key owing d admits its next request after (d + 1) × Period / Limit.
//   - FixedWindow: at the window's end; the next window starts empty.
//   - SlidingCounter and SlidingLog: as the charge ages out of the
//     sliding window, in at most two periods (SlidingCounter) or one
//     (SlidingLog).
//
// A key can owe only what its state can hold; a charge past that is an
// error (ErrDebtBound) that charges nothing, never a wrap. The buckets
// can owe at least 2^60 ticks of refill (36 years of the rule's rate
// when Period / Limit is a whole number of nanoseconds, 39 hours at the
// finest fraction); a fixed window a count of at least 256 × Limit for
// limits up to 2^32 (8 × at 2^40, none past Limit at 2^47 − 2); a sliding
// counter at least 256 × Limit up to a Limit of 2,046, then 524,286 (5 ×
// a Limit of 100,000), 4 × a Limit of a million, and none past its largest
// Limit; the log a window of min(256 × Limit, 4,194,302), in a ring of up
// to twice as many entries of 16 bytes when every charge is of 1. Each
// package's MaxCount or Bound gives the figure for a rule.
//
// A key that owes is never evicted as idle. One that MaxKeys evicts comes
// back refusing until its debt would have been paid, and owing, in every
// Decision, what it would have owed had it stayed: exactly, on the
// buckets and the fixed window; on the sliding counter and the log, what
// it owed at the eviction (the counter one more at most, its debt kept as
// a weighted count), and never less after, until the remembered instant
// (they forget which of the key's costs would have aged out first). After
// SetRule, such a key owes what a key held through the change would: its
// debt converted as a held key's is.
//
// # Stores
//
// A Store holds named policies and decides a request by several of them
// at once, each ask with a key and a cost of its own, all or nothing,
// with shadow asks that count what they would refuse (see Store.Decide).
// httplimit, grpclimit and Envoy's rate-limit service (package rls)
// decide every request through one, so that their policies live in
// process or on Redis alike: NewLocalStore keeps them in this process,
// each on a Limiter, and redislimit.NewStore on Redis, shared by every
// replica.
//
// A SlotStore also holds in-flight limits (SlotPolicy): at most N
// requests of a key at once, each holding a Slot from its admission until
// it ends, released once. LocalStore's are package inflight's lock-free
// Limiters; redislimit's hold each slot on Redis with an expiry that its
// replica renews.
//
// # Clocks
//
// Every decision reads the Limiter's clock once. SystemClock, the default,
// is Go's monotonic clock: on x86-64 Linux an ordered RDTSC, which on some
// virtual machines costs more than the rest of an Allow. NewCoarseClock
// makes a clock whose Now is one atomic load, in steps of its resolution
// (tokens and windows arrive up to one resolution late); NewTSCClock reads
// a plain RDTSC re-anchored to the monotonic clock. ManualClock moves only
// when told to, for tests.
//
// # Counts
//
// Stats and AppendCounts report what a Limiter has done: decisions by
// result (with Config.Stats, a per-core add of a few nanoseconds a
// request), keys held and their bound, evictions by reason. The metrics
// modules export AppendCounts; Stats has the table that maps one to the
// other.
//
// # Platforms
//
// Every algorithm is lock-free on every platform but the sliding log,
// which needs a 16-byte CAS: CMPXCHG16B on amd64, and on arm64 LSE's
// CASPAL or an LDAXP/STLXP loop on cores without LSE. Elsewhere (386, and
// other architectures) SlidingLog is served by its mutex twin. Go 1.24 or
// newer.
package floodgate
