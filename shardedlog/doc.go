// Package shardedlog holds floodgate's exact sliding window log, sharded
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
// needs more than twice N+2 entries of 16 bytes (see Log). A floodgate
// Limiter of the sliding log was measured at about 294 bytes per key at a
// million keys, each holding one entry, against 36 for the token bucket,
// whose state is one word inline in the table.
//
// Most users want the root package, floodgate, which registers the log as
// "sliding_log".
package shardedlog
