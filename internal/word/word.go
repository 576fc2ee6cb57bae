// Package word holds what the flat registry and the algorithms that keep
// their state inline in it agree on: the two marks a table writes into a
// state word, and the outcome of one operation on a word.
//
// A word whose top two bits are 10 is never a state: a token bucket's TAT
// lies in [−2^62, 2^62), where the top two bits are equal, and a window's
// word has its top bit clear. The table uses two such words as marks.
package word

import (
	"math"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/chaos"
)

// Marks a table writes over a state word with a CAS on the same word as
// every grant, so that no grant can land after them.
const (
	// Moved says the state now lives in the table's successor (a resize or
	// a rebase copied it there): find the key again.
	Moved uint64 = 2<<62 | 1
	// Dead says the key was removed (evicted or reset): it is no longer in
	// the table, and a request creates it anew.
	Dead uint64 = 2<<62 | 2
)

// IsMark reports whether w is Moved, Dead or any other word that cannot be
// a state.
func IsMark(w uint64) bool { return w>>62 == 2 }

// Status is what one operation on an inline word found.
type Status uint8

const (
	// Live: the operation ran on a live state.
	Live Status = iota
	// Gone: the word held a mark. Nothing changed; find the key again.
	Gone
	// Rebase: the reading lies beyond what the word can hold relative to
	// its table's origin. Nothing changed; move the table's origin
	// forward, then try again.
	Rebase
	// Early: the reading lies too far before the table's origin for a new
	// state to hold it. Nothing was made; the request is denied with
	// Never, as a reading that far before an existing key's origin is.
	Early
)

// RetireIf marks w Dead if idle holds for the state it holds, in one CAS
// on the word that every grant changes, and reports whether it did. A
// word that holds a mark is left alone.
func RetireIf(w *atomic.Uint64, idle func(v uint64) bool) bool {
	for {
		v := w.Load()
		if IsMark(v) || !idle(v) {
			return false
		}
		chaos.Yield()
		if w.CompareAndSwap(v, Dead) {
			return true
		}
		chaos.Retried()
	}
}

// Evict marks w Dead whatever state it holds and returns spent of that
// state, read in the same step: no grant lands between the reading and
// the mark. spent gives the instant from which the state answers as new,
// and what it owes beyond that instant (see floodgate's MaxKeys). A word
// that holds a mark is left alone, and Evict returns math.MinInt64 and 0.
func Evict(w *atomic.Uint64, spent func(v uint64) (at, owed int64)) (int64, int64) {
	for {
		v := w.Load()
		if IsMark(v) {
			return math.MinInt64, 0
		}
		at, owed := spent(v)
		chaos.Yield()
		if w.CompareAndSwap(v, Dead) {
			return at, owed
		}
		chaos.Retried()
	}
}
