// Package shardedlog is an exact sliding window log for one key that any
// number of goroutines share without a lock: a request of cost n at t
// passes if and only if the cost admitted in (t − period, t] plus n is at
// most the limit, with no estimate and no boundary at which twice the
// limit can pass. It never admits more than its rule, however many
// goroutines race on it.
//
// The log keeps one 16-byte entry per admitted request (its time and the
// cumulative cost up to it), published by a single 16-byte
// compare-and-swap: CMPXCHG16B on amd64, CASPAL or an LDAXP/STLXP loop on
// arm64. Elsewhere the same log runs behind a mutex, with the same
// answers. Memory follows the entries in the window: a ring that starts
// at two entries and never needs more than the power of two at or above
// 2(W + 2) entries, W the most the window holds (the limit, or up to 256
// times it for a key charged into debt).
//
// A cost known only after the work is charged with ChargeN, which cannot
// be refused: the window may then hold more than the limit, and the key
// owes the excess (floodgate.Decision.Owed) and refuses every request
// until enough has aged out of the window.
//
// Every method takes the time of the request: a reading of time.Now() in
// production, any time.Time in a test. Time is measured on the monotonic
// clock when both readings carry it. A request whose reading is older
// than the newest entry's is charged at the newest entry's time, so the
// log's times never go back.
//
// For one log per key in a table that bounds its keys, use floodgate.New
// with floodgate.SlidingLog; this package is for a caller that keeps its
// own logs.
package shardedlog
