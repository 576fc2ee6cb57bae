package inflight

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/word"
	"github.com/floodgate-go/floodgate/registry"
)

// A key taken and given back from several cores at once spreads: its word
// stays the one count of its slots, but a slot given back may be parked on
// the releasing P's lane of the key instead, still counted held in the
// word, and the next acquisition on that P takes it from there. So a hot
// key's requests touch lines of their own P, and its word, the line that
// every core would write, only when a lane is empty or full.
//
// Exactness. The word counts every slot in use or parked, and a slot is
// parked only by the release of one in use, so no more than the limit are
// ever in use. A parked slot is taken only while the word holds no more
// than the limit (held counts it, so one more in use stays within the
// limit, even just after SetLimit lowered it).
//
// No false refusal. An acquisition that finds the word full takes a
// parked slot from any lane, and refuses only if it found none and the
// word did not change meanwhile. A release parks only while the key holds
// at least a margin (parkMax per lane) below its limit, and, having
// parked, looks at the word again: if the key came near its limit
// meanwhile, it takes its slot back from the lane and gives it back
// through the word, which tells a refusing acquisition to look again. So
// parked slots exist near the limit only when parked before the key got
// there, and an acquisition that misses them saw them taken.
//
// Only a Limiter with no queue and no global cap spreads (a queue's order
// and a global count are one word each anyway), and only a key whose word
// lost a CAS to another core twice in one acquisition, with a limit of at
// least twice the margin. A spread key's lanes (a line per P) live in the
// table's pointer beside its word; Held, Sweep, EvictIdle, MaxKeys and
// SetLimit first give every parked slot back to the word (settle).

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

const (
	// spreadBit marks a spread key's word: its lanes hang beside it.
	spreadBit = 1 << 61
	// parkMax is the most slots a lane parks.
	parkMax = 2
	// spreadAfter is how many CASes one acquisition loses before its key
	// spreads.
	spreadAfter = 2
)

// lanes is a spread key's parked slots, a line per P.
type lanes struct {
	s []lane
}

// lane is one P's parked slots of a key, on a line of its own.
type lane struct {
	n       atomic.Int64 // slots parked: held in the word, used by no request
	touched atomic.Bool  // a slot was taken from here since the last sweep
	_       [64 - 16]byte
}

// pid returns the caller's P, for its lane: a hint only (the goroutine
// may move on at once), since every lane operation is atomic.
func pid() int {
	p := procPin()
	procUnpin()
	return p
}

// spreadOf returns the lanes of the key at slot i of t, or nil if the
// key was removed meanwhile.
func spreadOf(t *registry.Table, i int) *lanes { return (*lanes)(t.Ptr(i)) }

// at returns P p's lane of sp.
func (sp *lanes) at(p int) *lane { return &sp.s[p%len(sp.s)] }

// take takes a slot parked on the lane, if any.
func (st *lane) take() bool {
	for {
		n := st.n.Load()
		if n <= 0 {
			return false
		}
		chaos.Yield()
		if st.n.CompareAndSwap(n, n-1) {
			if !st.touched.Load() {
				st.touched.Store(true)
			}
			return true
		}
		chaos.Lost("inflight.lane")
	}
}

// takeParked takes a slot parked for the key at slot i of t, whose word
// was v: from the caller's lane, or from any if all are refused. The
// word must hold no more than the limit.
func (l *Limiter) takeParked(t *registry.Table, i int, v uint64, any bool) bool {
	sp := spreadOf(t, i)
	if sp == nil || held(v) > l.limit.Load() {
		return false
	}
	if !any {
		return sp.at(pid()).take()
	}
	for k := range sp.s {
		if sp.s[k].take() {
			return true
		}
	}
	return false
}

// park parks a released slot of the key at slot i of t, whose word was v,
// on P p's lane (the caller's), and reports whether it did; if not, the
// caller gives it back through the word.
func (l *Limiter) park(id registry.ID, t *registry.Table, i int, v uint64, p int) bool {
	sp := spreadOf(t, i)
	if sp == nil || v&waitMask != 0 || held(v)+l.margin > l.limit.Load() {
		return false
	}
	st := sp.at(p)
	n := st.n.Load()
	if n >= parkMax {
		return false
	}
	chaos.Yield()
	if !st.n.CompareAndSwap(n, n+1) {
		chaos.Lost("inflight.park")
		return false
	}
	// The key may have come near its limit since v: then an acquisition
	// may be refusing right now, having looked at this lane before the
	// slot was parked. Take it back and give it back through the word,
	// whose change sends that acquisition to look again.
	for v = t.Word(i).Load(); v == word.Moved; v = t.Word(i).Load() {
		t, i = l.flat.Find(id) // the key holds this slot: it is never removed
	}
	if held(v)+l.margin <= l.limit.Load() {
		return true
	}
	return !st.take() // taken meanwhile by an acquisition: it is given
}

// settle gives every slot parked for the key at slot i of t back to its
// word, and returns the word and whether a lane was taken from since
// the last call that cleared the marks (clear). Under the key's shard
// lock, so the word is live.
func settle(t *registry.Table, i int, clear bool) (uint64, bool) {
	w := t.Word(i)
	sp := spreadOf(t, i)
	if sp == nil {
		return w.Load(), false
	}
	var parked uint64
	touched := false
	for k := range sp.s {
		st := &sp.s[k]
		parked += uint64(st.n.Swap(0))
		if clear {
			touched = st.touched.Swap(false) || touched
		} else {
			touched = st.touched.Load() || touched
		}
	}
	for {
		v := w.Load()
		if parked == 0 {
			return v, touched
		}
		chaos.Yield()
		if w.CompareAndSwap(v, v-parked) {
			return v - parked, touched
		}
		chaos.Lost("inflight.settle")
	}
}

// spread gives key id its lanes and marks its word, under its shard's
// lock, unless it has them already or was removed meanwhile.
func (l *Limiter) spread(id registry.ID) {
	l.flat.Update(id, func(t *registry.Table, i int, cur unsafe.Pointer) unsafe.Pointer {
		if cur != nil {
			return cur
		}
		sp := &lanes{s: make([]lane, l.ps)}
		w := t.Word(i)
		for {
			v := w.Load()
			chaos.Yield()
			if w.CompareAndSwap(v, v|spreadBit) {
				return unsafe.Pointer(sp)
			}
			chaos.Lost("inflight.spread")
		}
	})
}

// spreadsAt reports whether a key may spread under limit: the Limiter has
// no queue and no global cap, and the limit is at least twice the margin.
func (l *Limiter) spreadsAt(limit uint64) bool {
	return l.spreads && limit >= 2*l.margin
}

// lanesPerKey is the lanes a spread key gets: one per P, as there may
// be at most that many at New (GOMAXPROCS raised later shares them).
func lanesPerKey() int { return max(runtime.GOMAXPROCS(0), 1) }

// spreadKeys returns the keys spread now.
func (l *Limiter) spreadKeys() int {
	n := 0
	if l.spreads {
		l.flat.DeleteIf(func(t *registry.Table, i int) bool {
			if v := t.Word(i).Load(); v&spreadBit != 0 && !word.IsMark(v) {
				n++
			}
			return false
		})
	}
	return n
}
