// Package atomicwindow is a fixed window and a sliding window counter for
// one key that any number of goroutines share without a lock: the whole
// state is one atomic word, a request is one compare-and-swap, and a
// denial writes nothing. Neither ever admits more than its rule, however
// many goroutines race on it.
//
// Windows are aligned to multiples of the period since the Unix epoch: a
// window of a minute covers each minute of the clock. NewFixed counts the
// cost admitted in the current window and admits a request if the count
// plus its cost is at most the limit; across a boundary it lets through
// up to twice the limit in one period. NewSliding weighs the previous
// window's count by the part of it still inside a window of one period
// ending now, and admits a request if that estimate plus the current
// window's count plus its cost is at most the limit, computed exactly in
// integers.
//
// A cost known only after the work is charged with ChargeN, which cannot
// be refused: the window's count may pass the limit, and the key then
// owes the excess (floodgate.Decision.Owed) and refuses every request
// until it has aged out. Refund gives back what an earlier AllowN or
// ChargeN took from its window.
//
// Every method takes the time of the request: a reading of time.Now() in
// production, any time.Time in a test. Time is measured on the monotonic
// clock when both readings carry it.
//
// For one window per key in a table that bounds its keys, use
// floodgate.New with floodgate.FixedWindow or floodgate.SlidingCounter;
// this package is for a caller that keeps its own windows.
package atomicwindow
