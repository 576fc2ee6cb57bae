// Package shardlog holds floodgate's exact sliding window log, sharded
// by key: each key has a Log of its own, lock-free on 16-byte entries, and
// nothing is shared between keys. MutexLog is its twin behind a mutex,
// with the same semantics (the reference the tests hold Log to).
//
// A request of cost n at t is allowed if and only if the cost admitted in
// (t − T, t] plus n is at most N. The log keeps one 16-byte entry per
// admitted request: its charged time, and its index with the cumulative
// cost admitted up to it. An entry is published by a single 16-byte CAS
// that checks the slot's old content, so a slow writer can never leave a
// slot half written or write into a slot that has moved on: a reader that
// finds a slot's index is not the one it expects knows its view is stale
// and reads again. The cumulative cost is what makes weighted cost exact:
// any cost is one entry and one CAS, and the cost in a window is a
// difference of two cumulative counts. The 16-byte CAS is CMPXCHG16B on
// amd64, and CASPAL (LSE) or an LDAXP/STLXP loop on arm64; elsewhere
// (LockFree reports false) the root package serves the log with MutexLog.
//
// Memory follows the live entries: a ring starts at two entries, grows
// with the window and shrinks back when the window empties, and never
// needs more than the power of two at or above twice N+2 entries of 16
// bytes, or twice Params.Bound+2 for a key in debt (see Log). A floodgate
// Limiter of the sliding log was measured at about 294 bytes per key at a
// million keys, each holding one entry, against 36 for the token bucket,
// whose state is one word inline in the table.
//
// # Debt
//
// ChargeN takes a cost already spent, which cannot be refused: it is an
// entry like a grant's, charged at max(now, the newest entry's time), but
// without the limit's check, so that the cost in the window may pass N.
// The key then owes the excess, which every Decision reports (Owed, the
// cost in the window that ends where a request would be charged, less N,
// or 0). While it owes, every admission is refused, since nothing fits
// beside more than N, and a denial's RetryAfter is the exact wait until
// enough has aged out for the request to fit. The debt ages out with the
// entries that carry it: a key owes nothing a period after its last
// charge, however much it owed.
//
// The bound. The window may hold at most Params.Bound after a charge:
// 256 times the limit, and at most 4,194,302, the largest limit, so that
// a ring of the entries it can hold stays within what the entries' 24-bit
// index tells apart. A charge past it charges nothing and returns an
// error wrapping ErrDebtBound that names the bound, never a wrap. Since
// every entry that carries cost costs at least 1, the bound is also what
// a key in debt can cost in memory: a ring of at most the power of two at
// or above 2(Bound+2) entries of 16 bytes, 8 MiB for a limit of 1,000,
// 128 MiB at the largest bound, reached only by as many separate charges
// within one period.
//
// Reserve, then settle. AllowGrant admits an estimate and returns the
// Grant of its entry; RefundGrant gives back part of it when the cost
// turns out lower, exactly, if no entry of the key was charged after it,
// and reports whether it did; an overrun is a ChargeN. MutexLog lapses
// in exactly the cases Log does.
//
// The root package, floodgate, registers the log as "sliding_log", and
// the public package shardedlog wraps one Log for a caller that keeps its
// own. Only this repository imports this package.
package shardlog
