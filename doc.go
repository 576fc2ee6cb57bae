// Package floodgate limits the rate of requests per client: Allow(key) on
// every request, from any number of goroutines, in nanoseconds, without a
// global lock and without allocating for a key it has seen.
//
// A Limiter keeps one state per key in a flat, sharded open-addressing
// table. A key is identified by a 128-bit keyed hash, and the state of
// the word algorithms (token and leaky bucket, fixed window, sliding
// counter) lives beside that identity in the slot: finding a key and
// deciding its request touch one cache line. The default algorithm,
// "token_bucket", gives each key a bucket of Burst tokens (Limit when Burst
// is 0) that refills continuously at Limit per Period; a new key starts
// full. AllowN(key, n) is allowed if and only if the bucket holds at least
// n tokens at that instant, and then takes exactly n; a denial takes
// nothing. The bucket is one atomic word (a GCRA theoretical arrival time)
// changed by a CAS loop, in exact integer arithmetic: where Period/Limit is
// a whole number of nanoseconds, every decision equals exact rational
// arithmetic at every nanosecond (see atomicbucket for the other cases).
//
// Guarantees, under any number of goroutines:
//   - a key never passes more than Burst + Limit × elapsed / Period, not by
//     one request, with eviction running and with callers whose clock
//     readings reach the bucket out of order;
//   - with Config.Global, all keys together never pass more than the global
//     rule allows, and a key refused by the global cap gets its own grant
//     back;
//   - with Config.MaxKeys, Len never exceeds the bound, and a key evicted
//     to make room comes back with no more than it left with;
//   - for a key already present, Allow and AllowN allocate nothing, take no
//     lock, and write nothing but the key's own state word (which shares
//     its cache line with two other keys' words).
package floodgate
