package floodgate

import (
	"math"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/registry"
)

// sketch remembers, for keys evicted at Config.MaxKeys, the instant from
// which each would have answered as a new key: a max-sketch of fixed size
// indexed by the key's identity. Each evicted key raises its two cells to
// its instant; a key created again starts from the smaller of its two
// cells, which is at least its own instant, so it can never come back with
// more than it left with. A collision can only make the smaller cell
// later: a key that shares both cells with busier evicted keys starts
// stricter, never looser. Old instants lie in the past, where they change
// nothing: the sketch ages for free.
type sketch struct {
	cells []atomic.Int64
	mask  uint64
}

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
func (s *sketch) pair(id registry.ID) (*atomic.Int64, *atomic.Int64) {
	return &s.cells[id.Lo&s.mask], &s.cells[id.Hi>>32&s.mask]
}

// record raises id's cells to at.
func (s *sketch) record(id registry.ID, at int64) {
	a, b := s.pair(id)
	for _, c := range []*atomic.Int64{a, b} {
		for {
			old := c.Load()
			if old >= at || c.CompareAndSwap(old, at) {
				break
			}
		}
	}
}

// spent returns the instant from which id may start as new: the smaller of
// its cells, math.MinInt64 without a sketch.
func (s *sketch) spent(id registry.ID) int64 {
	if s == nil {
		return math.MinInt64
	}
	a, b := s.pair(id)
	return min(a.Load(), b.Load())
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

// spent is the sketch's spent, math.MinInt64 before any eviction.
func (z *lazySketch) spent(id registry.ID) int64 { return z.p.Load().spent(id) }

// record is the sketch's record, making the sketch first if need be.
func (z *lazySketch) record(id registry.ID, at int64) {
	s := z.p.Load()
	if s == nil {
		z.p.CompareAndSwap(nil, newSketch(z.maxKeys))
		s = z.p.Load()
	}
	s.record(id, at)
}

// raise raises every cell that holds an instant after at to at least
// full, after a change of rule at at (see ruleSet.spentSince): such a
// cell's instant was reckoned under the old rule, and the key it stands
// for counts as holding nothing at the change. Raising is what record
// does, so a concurrent record or read sees either value, both of which
// are no looser than the key's own.
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
