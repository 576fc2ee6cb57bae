// Package shardedlog holds floodgate's window algorithms: the fixed window
// and the sliding window counter, each as Window, lock-free on one atomic
// word, and MutexWindow, its twin behind a mutex with the same semantics;
// and the exact sliding window log, as Log, lock-free on 16-byte entries,
// and MutexLog, its twin.
//
// Windows are aligned to multiples of the period T on the clock's own
// scale: window k covers [k·T, (k+1)·T). A state records its counts with
// the index of the window they belong to, so an idle gap of any length —
// one window, two, a million — reads as empty without any timer, and no
// window number is ever taken for another.
//
// A reading from a window older than the state's (a caller whose clock
// read was overtaken by another's, or a clock set back) is denied: that
// window's count is no longer held, and charging the request to a later
// window would let the older window pass more than N by request time.
//
// The log keeps one 16-byte entry per admitted request: its charged time,
// and its index with the cumulative cost admitted up to it. An entry is
// published by a single 16-byte CAS that checks the slot's old content, so
// a slow writer can never leave a slot half written or write into a slot
// that has moved on: a reader that finds a slot's index is not the one it
// expects knows its view is stale and reads again. The cumulative cost is
// what makes weighted cost exact: any cost is one entry and one CAS, and
// the cost in a window is a difference of two cumulative counts. The 16-byte
// CAS is CMPXCHG16B on amd64, and CASPAL (LSE) or an LDAXP/STLXP loop on
// arm64; elsewhere the root package serves the log with MutexLog. Measured memory: see results/ (bytes per key at 100,000
// keys, each holding one entry, from make bench).
//
// Most users want the root package, floodgate, which registers these as
// "fixed_window", "sliding_counter" and "sliding_log".
package shardedlog
