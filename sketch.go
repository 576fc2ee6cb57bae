package floodgate

import (
	"math"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/registry"
)

// sketch remembers, for keys evicted at Config.MaxKeys under one rule,
// what each would need to come back as it left: the instant from which it
// would have answered as a new key, and what it owed beyond a spent state
// (see objectAlgorithm.newSpent and the windows' and the log's Evict; the
// buckets' instant carries their debt, and they owe nothing beyond it). A
// max-sketch of fixed size indexed by the key's identity: each evicted key
// raises its two cells to its instant; a key created again starts from the
// smaller of its two cells, which is at least its own instant, so it can
// never come back with more than it left with. A collision can only make
// the smaller cell later: a key that shares both cells with busier
// evicted keys starts stricter, never looser. Old instants lie in the
// past, where they change nothing: the sketch ages for free.
//
// What a key owed is kept beside its cell's instant, tagged with it: a
// cell remembers the largest debt of the keys evicted at its instant, and
// forgets it when a later instant takes the cell. A later instant refuses
// whatever an earlier one does, whatever the debts (each algorithm's
// state made spent refuses every request until the window of its instant,
// or its entry, is over), so the debt changes only what the key is told
// it owes: its own, unless both its cells collide with keys evicted
// later, whose debt it is then told. The debts take a second array, made
// on the first eviction of a key that owes: 8 bytes per key of the bound
// more.
type sketch struct {
	cells []atomic.Int64
	owed  atomic.Pointer[[]atomic.Uint64] // tag<<owedBits | owed, per cell
	mask  uint64
}

// A cell's debt word: the top bits tag the instant it belongs to, the rest
// hold the debt. Every bound of a debt fits (the fixed window's, at most
// 2^47, is the largest).
const (
	owedBits = 48
	owedMask = 1<<owedBits - 1
)

// tagOf is the tag of the instant at: its top bits, mixed.
func tagOf(at int64) uint64 { return uint64(at) * 0x9E3779B97F4A7C15 >> owedBits }

// newSketch makes a sketch of one cell per key of the bound, at least 1,024
// and at most 2^24 (the bits pair draws on), rounded up to a power of two:
// 8 bytes per key of MaxKeys.
func newSketch(maxKeys int) *sketch {
	n := 1024
	for n < maxKeys && n < 1<<24 {
		n *= 2
	}
	s := &sketch{cells: make([]atomic.Int64, n), mask: uint64(n - 1)}
	for i := range s.cells {
		s.cells[i].Store(math.MinInt64)
	}
	return s
}

// The two cells of an ID come from bits that neither the shard (the top of
// Hi) nor the bucket (the low half of Hi) depends on: the low bits of Lo,
// which the table keeps (32 of them), and the upper middle of Hi.
func (s *sketch) pair(id registry.ID) (uint64, uint64) {
	return id.Lo & s.mask, id.Hi >> 32 & s.mask
}

// record raises id's cells to at, with what the key owed beyond it.
func (s *sketch) record(id registry.ID, at, owed int64) {
	i, j := s.pair(id)
	s.put(i, at, owed)
	s.put(j, at, owed)
}

// put raises cell i to at, and its debt, if at holds the cell, to owed.
func (s *sketch) put(i uint64, at, owed int64) {
	c := &s.cells[i]
	for {
		old := c.Load()
		if old >= at || c.CompareAndSwap(old, at) {
			break
		}
	}
	ds := s.owed.Load()
	if ds == nil {
		if owed <= 0 {
			return
		}
		fresh := make([]atomic.Uint64, len(s.cells))
		s.owed.CompareAndSwap(nil, &fresh)
		ds = s.owed.Load()
	}
	d, tag := &(*ds)[i], tagOf(at)
	for {
		old := d.Load()
		// Read after the debt word, so that a later instant's record,
		// which raises the cell first, makes the CAS below fail.
		if c.Load() != at {
			return // a later instant holds the cell: its debt stands
		}
		cur := uint64(0)
		if old>>owedBits == tag {
			cur = old & owedMask
		}
		next := tag<<owedBits | max(cur, uint64(min(max(owed, 0), owedMask)))
		if next == old || d.CompareAndSwap(old, next) {
			return
		}
	}
}

// debt is what cell i remembers owed with the instant at, which it holds:
// 0 if its debt word is another instant's.
func (s *sketch) debt(ds *[]atomic.Uint64, i uint64, at int64) int64 {
	if w := (*ds)[i].Load(); w>>owedBits == tagOf(at) {
		return int64(w & owedMask)
	}
	return 0
}

// read returns what the sketch remembers of id: the smaller of its cells,
// math.MinInt64 for none, and the debt remembered with it (the smaller,
// if both cells hold that instant).
func (s *sketch) read(id registry.ID) (at, owed int64) {
	i, j := s.pair(id)
	a, b := s.cells[i].Load(), s.cells[j].Load()
	at = min(a, b)
	ds := s.owed.Load()
	if ds == nil || at == math.MinInt64 {
		return at, 0
	}
	owed = math.MaxInt64
	if a == at {
		owed = s.debt(ds, i, at)
	}
	if b == at {
		owed = min(owed, s.debt(ds, j, at))
	}
	return at, owed
}

// lazySketch is a Limiter's sketch, made on the first eviction at the
// bound: until then no key was evicted, so the sketch would hold nothing,
// and a Limiter with MaxKeys that never reaches it (a policy of httplimit
// with its default bound, say) costs none of its 8 bytes per key of the
// bound. Reading one costs an atomic load.
type lazySketch struct {
	maxKeys int // the bound it is sized for; 0 without MaxKeys
	p       atomic.Pointer[sketch]
}

// memory is the sketch's read: the instant from which id may start as
// new (math.MinInt64 before any eviction), and what it owes beyond it.
func (z *lazySketch) memory(id registry.ID) (at, owed int64) {
	if s := z.p.Load(); s != nil {
		return s.read(id)
	}
	return math.MinInt64, 0
}

// record is the sketch's record, making the sketch first if need be.
func (z *lazySketch) record(id registry.ID, at, owed int64) {
	s := z.p.Load()
	if s == nil {
		z.p.CompareAndSwap(nil, newSketch(z.maxKeys))
		s = z.p.Load()
	}
	s.record(id, at, owed)
}

// raise raises every cell that holds an instant after at to at least
// full, after a change of rule at at (see ruleSet.spentSince): such a
// cell's instant was reckoned under the old rule, and the key it stands
// for counts as holding nothing at the change. Raising is what record
// does, so a concurrent record or read sees either value, both of which
// are no looser than the key's own. A debt stays with the instant it
// was remembered with.
func (z *lazySketch) raise(at, full int64) {
	s := z.p.Load()
	if s == nil {
		return
	}
	for i := range s.cells {
		c := &s.cells[i]
		for {
			old := c.Load()
			if old <= at || old >= full || c.CompareAndSwap(old, full) {
				break
			}
		}
	}
}
