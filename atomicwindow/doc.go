// Package atomicwindow holds floodgate's window algorithms: the fixed
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
// Most users want the root package, floodgate, which registers these as
// "fixed_window" and "sliding_counter".
package atomicwindow
