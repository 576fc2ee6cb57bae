package floodgate

import (
	"math"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/flat"
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
	rs    *ruleSet // the rule its memories were reckoned under
	cells []atomic.Int64
	owed  atomic.Pointer[[]atomic.Uint64] // tag<<owedBits | owed, per cell
	mask  uint64
	// prev is the sketch of the rule before rs, while SetRule converts
	// it into this one (see lazySketch.settle): a key of rs reads both.
	prev atomic.Pointer[sketch]
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
func newSketch(maxKeys int, rs *ruleSet) *sketch {
	n := 1024
	for n < maxKeys && n < 1<<24 {
		n *= 2
	}
	s := &sketch{rs: rs, cells: make([]atomic.Int64, n), mask: uint64(n - 1)}
	for i := range s.cells {
		s.cells[i].Store(math.MinInt64)
	}
	return s
}

// The two cells of an ID come from bits that neither the shard (the top of
// Hi) nor the bucket (the low half of Hi) depends on: the low bits of Lo,
// which the table keeps (32 of them), and the upper middle of Hi.
func (s *sketch) pair(id flat.ID) (uint64, uint64) {
	return id.Lo & s.mask, id.Hi >> 32 & s.mask
}

// record raises id's cells to at, with what the key owed beyond it.
func (s *sketch) record(id flat.ID, at, owed int64) {
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
func (s *sketch) read(id flat.ID) (at, owed int64) {
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
//
// A sketch remembers under one rule. A change of rule (SetRule) makes a
// sketch of the new rule, into which it converts the old one's memories
// (settle) once every table is of the new rule: until then, keys are
// evicted under both rules, each into its rule's sketch, and a key of the
// new rule reads both, the old one's converted.
type lazySketch struct {
	maxKeys int // the bound it is sized for; 0 without MaxKeys
	p       atomic.Pointer[sketch]
}

// memory returns what the sketch remembers of id for a key of the rule
// rs: the instant from which it may start as new (math.MinInt64 for
// none), and what it owes beyond a spent state (see sketch).
func (z *lazySketch) memory(id flat.ID, rs *ruleSet) (at, owed int64) {
	h := z.p.Load()
	switch {
	case h == nil:
		return math.MinInt64, 0
	case h.rs == rs:
		at, owed = h.read(id)
		if pv := h.prev.Load(); pv != nil {
			pa, po := pv.read(id)
			pa, po = convertMemory(pv.rs, rs, pa, po)
			if pa > at || pa == at && po > owed {
				at, owed = pa, po
			}
		}
		return at, owed
	case h.rs.gen < rs.gen:
		// The change to rs has converted the tables but not the sketch,
		// and no key was evicted under rs yet.
		at, owed = h.read(id)
		return convertMemory(h.rs, rs, at, owed)
	}
	// A key whose table the change has not reached yet reads the sketch
	// of its own rule. (Peek on a table it loaded before the change reads
	// the new one as it is.)
	if pv := h.prev.Load(); pv != nil && pv.rs == rs {
		return pv.read(id)
	}
	return h.read(id)
}

// convertMemory is what a key remembered under rule from as (at, owed) is
// remembered as under the rule to, which replaced it (see SetRule).
func convertMemory(from, to *ruleSet, at, owed int64) (int64, int64) {
	if at == math.MinInt64 {
		return at, 0
	}
	return from.alg.(builtin).convertSpent(at, owed, to.at, to.alg)
}

// record remembers that id, of a table of rule rs, was evicted spent
// until at and owing owed beyond it, in the sketch of rs, making it first
// if need be.
func (z *lazySketch) record(id flat.ID, rs *ruleSet, at, owed int64) {
	z.sketchOf(rs).record(id, at, owed)
}

// sketchOf returns the sketch of rule rs, making it if need be: the head,
// or, for a key evicted under the rule before the head's while a change
// is under way, the head's prev.
func (z *lazySketch) sketchOf(rs *ruleSet) *sketch {
	for {
		h := z.p.Load()
		switch {
		case h == nil:
			if z.p.CompareAndSwap(nil, newSketch(z.maxKeys, rs)) {
				continue
			}
		case h.rs == rs:
			return h
		case h.rs.gen < rs.gen:
			n := newSketch(z.maxKeys, rs)
			n.prev.Store(h)
			z.p.CompareAndSwap(h, n)
		default:
			if pv := h.prev.Load(); pv != nil {
				return pv // of rs: changes of rule are made one at a time
			}
			h.prev.CompareAndSwap(nil, newSketch(z.maxKeys, rs))
		}
	}
}

// settle ends a change to the rule rs, once every table is of rs: what
// the sketch of the rule before remembers is converted into rs's sketch,
// cell by cell, and the old sketch dropped. Keys are evicted under rs
// meanwhile, and read both. Each algorithm's conversion never makes a
// later instant an earlier one, so that a key, which reads the earlier of
// its two cells, reads no less than its own memory converted.
func (z *lazySketch) settle(rs *ruleSet) {
	h := z.p.Load()
	if h == nil {
		return
	}
	if h.rs != rs {
		n := newSketch(z.maxKeys, rs)
		n.prev.Store(h)
		if !z.p.CompareAndSwap(h, n) {
			n = z.p.Load() // a key evicted under rs made it, with h as its prev
		}
		h = n
	}
	pv := h.prev.Load()
	if pv == nil {
		return
	}
	ds := pv.owed.Load()
	for i := range pv.cells {
		at := pv.cells[i].Load()
		if at == math.MinInt64 {
			continue
		}
		owed := int64(0)
		if ds != nil {
			owed = pv.debt(ds, uint64(i), at)
		}
		at, owed = convertMemory(pv.rs, rs, at, owed)
		h.put(uint64(i), at, owed)
	}
	h.prev.Store(nil)
}
