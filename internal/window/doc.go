// Package window holds floodgate's window algorithms: the fixed
// window and the sliding window counter, each as Window, lock-free on one
// atomic word, and MutexWindow, its twin behind a mutex with the same
// semantics (the reference the tests hold Window to). The same transitions
// also run on a word held elsewhere (the *Word methods of Params), which
// is how the root package keeps a window inline in its table.
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
// # Debt
//
// ChargeN (ChargeWord on an inline word) charges a cost already incurred
// and cannot be refused: the count of the window of the reading may pass
// the limit N, and the key then owes the excess (Decision.Owed). While it
// owes, every admission is refused, and a denial's RetryAfter is the
// exact wait until the request fits. The fixed window pays its debt at
// the window's end: the next window starts at 0 whatever the last one
// held. The sliding counter pays it as it ages out: the window's count
// becomes the previous one, weighted by the part of it still inside the
// sliding window, so the estimate falls through the next window and the
// debt is gone by its end at the latest; what a key owes at e into a
// window is max(0, ceil(prev × (T − e) / T) + curr − N).
//
// A debt is bounded by what a count can hold, Params.MaxCount: at least
// 256 times the limit for limits up to 2^31 − 2 (fixed) and 2,046
// (sliding), at least 4 times it up to 2^45 − 2 and 2^21 − 2, and never
// less than the limit itself. A charge that would take a window's count
// past the bound charges nothing and is an error wrapping ErrDebtBound,
// never a wrap. A Refund (the settle of an over-estimate) takes back from
// a window in debt exactly what it gives back.
//
// The root package, floodgate, registers these as "fixed_window" and
// "sliding_counter", and the public package atomicwindow wraps one Window
// for a caller that keeps its own. Only this repository imports this
// package.
package window
