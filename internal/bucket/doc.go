// Package bucket holds floodgate's token bucket: Bucket, lock-free on
// one atomic word, and MutexBucket, its twin behind a mutex with the same
// semantics. Params validates a rule once and converts it to the exact
// fixed point all of them compute with.
//
// The leaky bucket as a meter decides exactly as the token bucket does, so
// Bucket serves for both; LeakyMutex is the meter in its textbook form,
// written independently, against which the tests hold Bucket.
//
// # Debt
//
// ChargeN (ChargeWord on an inline word) takes a cost that cannot be
// refused: the units are taken whatever the bucket holds, and a bucket
// that held fewer is left owing the rest, its TAT beyond now + tau. While
// it owes, every request is refused, as GCRA refuses any request whose
// TAT lies too far ahead; the debt is paid back at the rule's rate, one
// unit per interval, after which the bucket refills as usual. A denial's
// RetryAfter is then the wait until the debt is paid and the request's
// cost is there. Every Decision says what is owed: Owed is 0 unless the
// TAT lies beyond now + tau, which a charge causes, and so do waiting
// reservations and a reading older than the latest grant. Refund gives
// back a charge's units exactly, in debt or not. The leaky bucket is the
// meter whose level may rise above the capacity, and drains at the rate;
// it decides as the token bucket does.
//
// The debt is bounded by the state's range, never wrapped: a TAT lies at
// most 2^61 ticks after the state's origin, and a reading is served in
// place at most 2^60 ticks after it (past that the state moves its
// origin and carries the debt across exactly). So at any reading a key
// may owe until at least 2^60 ticks later: at least (2^60 − tau) /
// interval units beyond the empty bucket. At a scale of 1 (every rule
// whose interval is a whole number of nanoseconds) that is 2^60 ns, 36.5
// years, and up to 73 years after the origin: 1.9 × 10^10 units for a
// rule of 1,000 a minute. At the finest scale, 8192 ticks a nanosecond,
// it is 2^47 ns, 39 hours, and up to 78 hours after the origin: 1.4 ×
// 10^14 units for 999,983 a millisecond. A charge whose TAT would pass
// the bound returns an error wrapping ErrDebtBound that says how much
// more may be charged, and charges nothing.
//
// The root package, floodgate, keeps one bucket per key on these
// transitions, and the public package atomicbucket wraps one Bucket for a
// caller that keeps its own. Only this repository imports this package:
// its names (the word protocol, the twins, retiring and successors) are
// what the root package and the tests need, not what a user calls.
package bucket
