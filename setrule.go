package floodgate

import (
	"fmt"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/window"
	"github.com/floodgate-go/floodgate/internal/word"
)

// ruleSet is one rule in force, in every form a request needs. A Limiter
// holds the current one; each table of its registry holds the one its
// states were made under, and a request reads it from there (one load
// from a line the lookup has just read), so that a state and the rule it
// is read with are always one pair, also while SetRule moves the tables.
// A ruleSet is never changed once published.
type ruleSet struct {
	bucket   bucket.Params // for bucketWords: first, where the request reads it
	window   window.Params // for windowWords
	capacity int64
	rule     Rule
	alg      algorithm
	// With changed, at is the instant of the SetRule that made this rule,
	// at which what the sketch remembers under the rule before is
	// converted (see lazySketch); gen counts the changes.
	changed bool
	at      int64
	gen     uint64
}

func newRuleSet(r Rule, alg algorithm) *ruleSet {
	rs := &ruleSet{capacity: r.Capacity(), rule: r, alg: alg}
	if w, ok := alg.(wordAlgorithm); ok {
		w.params(rs)
	}
	return rs
}

// rulesOf is the rule that the states of table t were made under.
func rulesOf(t *flat.Table) *ruleSet { return (*ruleSet)(t.Aux) }

// SetRule makes r the rule of every key, held or not, from now on. It
// validates r as New does and returns New's error for a rule New would
// refuse (with the Limiter's algorithm); then nothing changes. It is safe
// to call at any time, from any goroutine, beside any other method; calls
// to SetRule are applied one at a time. Only the per-key Rule changes: the
// global cap (Config.Global), the algorithm, MaxKeys and IdleTTL stay,
// and Stats go on counting.
//
// No key gains allowance from the change. At the instant T of the change
// (the clock's reading when SetRule begins), each key held holds at most
// min(what it held, the new capacity), and from then on it refills at the
// new rate; a key created after the change starts full under the new
// rule. A window's key has also spent what it spent: a limit lowered by d
// leaves it d less than it held (never below 0), so that the window
// admits no more than the new limit in all, as a counter of requests
// would. What a key held, and what it holds after, is for each algorithm:
//
//   - token_bucket, leaky_bucket: its tokens at T, a fraction (or below 0
//     while waiters hold reservations); it holds min(tokens, new capacity),
//     rounded down to the new rule's finest tick, and refills at the new
//     rate from there. Reservations keep the times promised.
//   - fixed_window, sliding_counter: the largest cost a request at T could
//     take (0 if T lies in a window before the key's own). The key moves
//     to the new period's window of T, with min(held', new Limit) left in
//     it and no previous window's count, where held' is held less what
//     the limit was lowered by, at least 0.
//   - sliding_log: N minus the cost in the window where a request at T is
//     charged. The key holds one entry, charged at that instant, of the
//     cost that leaves it min(held', new Limit), held' as for the windows
//     (a key that owes owes as much); it leaves the window one new Period
//     later.
//
// Every key held is converted before SetRule returns, so every decision
// after it respects the new rule, and a key left untouched across several
// changes is converted at each of them. The conversion moves each shard
// of the table to a new table under the shard's lock, with one CAS per key
// (the CAS that a resize already makes), so requests never wait for it: a
// request that lands before its key's CAS is converted with it, one that
// comes after decides under the new rule. A request races the change as
// it races any other request, and counts as before it or after it.
//
// A refund (Limits, the global cap) or a cancelled wait whose grant was
// made under the old rule, and whose key was converted in between, is
// dropped: the key stays charged (stricter, never looser). With MaxKeys,
// a key evicted before the change and still spent at T comes back as a
// key that held nothing at T and owed what it owed then, converted as a
// held key's debt is (the sliding counter's a window later, as for a
// count above its limit). A key evicted as idle comes back full.
func (l *Limiter) SetRule(r Rule) error {
	alg, err := build(l.name, l.factory, r)
	if err != nil {
		return err
	}
	if _, ok := alg.(builtin); !ok {
		return fmt.Errorf("floodgate: algorithm %q cannot change its rule: it is registered, and SetRule converts only the built-in algorithms' states; make a new Limiter for the new rule", l.name)
	}

	l.setMu.Lock()
	defer l.setMu.Unlock()
	at := l.now()
	if cur := l.rules.Load(); cur.changed {
		at = max(at, cur.at) // changes keep their order on the clock too
	}
	rs := newRuleSet(r, alg)
	rs.changed, rs.at, rs.gen = true, at, l.rules.Load().gen+1
	// Published first, for Peek and WaitN of keys not held and for the
	// reference of capacity; keys are created under their table's rule,
	// which changes only below.
	l.rules.Store(rs)

	var origin int64
	var words func(old *flat.Table, w uint64) uint64
	var ptrs func(old *flat.Table, i int, p unsafe.Pointer) unsafe.Pointer
	switch l.kind {
	case bucketWords:
		origin = at // every converted word lies within a new origin's range
		words = func(old *flat.Table, w uint64) uint64 {
			if word.IsMark(w) {
				return w
			}
			return rulesOf(old).bucket.ConvertValue(w, old.Origin, at, &rs.bucket)
		}
	case windowWords:
		origin = rs.window.Origin(at)
		words = func(old *flat.Table, w uint64) uint64 {
			if word.IsMark(w) {
				return w
			}
			return rulesOf(old).window.ConvertValue(w, old.Origin, at, &rs.window)
		}
	default:
		a := alg.(objectAlgorithm) // every builtin of the object engine is one
		ptrs = func(_ *flat.Table, _ int, p unsafe.Pointer) unsafe.Pointer {
			if p == nil {
				return nil
			}
			s := l.stateAt(p)
			for {
				if c := a.convert(s, at); c != nil {
					return l.pointerTo(c)
				}
				s = s.Successor(at) // retired by itself (a rebase): convert what it carries
			}
		}
	}
	l.flat.Convert(origin, unsafe.Pointer(rs), words, ptrs)
	l.sketch.settle(rs)
	return nil
}

// origin is the origin a table of rule rs moved for a reading at now gets.
func (l *Limiter) origin(rs *ruleSet, now int64) int64 {
	if l.kind == windowWords {
		return rs.window.Origin(now)
	}
	return now
}

// rebaseWord is the flat table's Rebase hook for inline words: a rebase
// keeps the table's rule.
func (l *Limiter) rebaseWord(old *flat.Table, w uint64, to int64) uint64 {
	if l.kind == bucketWords {
		return rulesOf(old).bucket.RebaseWord(w, old.Origin, to)
	}
	return rulesOf(old).window.RebaseWord(w, old.Origin, to)
}
