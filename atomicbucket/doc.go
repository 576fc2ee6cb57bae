// Package atomicbucket is a token bucket for one key that any number of
// goroutines share without a lock: its whole state is one atomic word, a
// request is one compare-and-swap, and a denial writes nothing. It never
// admits more than its rule, however many goroutines race on it.
//
// A Bucket of limit N per period T with burst B holds at most B tokens
// (B = N when burst is 0) and refills continuously at N per T; a request
// of cost n passes if the bucket holds n tokens, and takes them. This is
// GCRA, exact in integer arithmetic: the bucket keeps its theoretical
// arrival time in fixed point, exact for every rule whose interval T/N is
// a whole number of nanoseconds and rounded towards the stricter side
// otherwise. The leaky bucket as a meter decides exactly as this bucket
// does, so a Bucket serves for both.
//
// A cost known only after the work is charged with ChargeN, which cannot
// be refused: a bucket that held less is left owing the rest
// (floodgate.Decision.Owed), refuses every request until the debt is paid
// back at the rule's rate, then refills as usual. Refund gives back what
// an earlier AllowN or ChargeN took, exactly.
//
// Every method takes the time of the request, as x/time/rate does: a
// reading of time.Now() in production, any time.Time in a test. Time is
// measured on the monotonic clock when both readings carry it.
//
// For one bucket per key (per client, per route) in a table that bounds
// its keys, use floodgate.New, which keeps this state inline in a flat
// table; this package is for a caller that keeps its own buckets.
package atomicbucket
