// Package tally keeps counters that every core adds to at once, for a few
// nanoseconds each: one block of counters per P (the Go scheduler's
// processor), so that no two cores ever write the same cache line to
// count.
//
// An add pins its goroutine to its P (runtime.procPin, which sync.Pool
// uses too, and which the runtime keeps for outside packages: see
// go.dev/issue/67401), and while pinned nothing else can run on that P,
// so the P's own counter is read and written back without a
// read-modify-write instruction: an atomic load and an atomic store, both
// plain moves on amd64 and arm64. A striped counter that chooses its
// stripe by hashing (xsync.Counter) pays a sync.Pool round trip and a CAS
// instead.
//
// A P whose id is past the blocks made at New (GOMAXPROCS raised since)
// adds to a shared spill block with an atomic add: slower, never wrong.
package tally

import (
	"math"
	"runtime"
	"sync/atomic"
	"unsafe"
)

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// line is the cache line size this package pads to: 64 bytes on the
// platforms floodgate is built for, and 128 on Apple's arm64 cores' L2,
// where 64 still keeps adjacent lines' writers apart in L1.
const line = 64

// words is the number of int64 in a line.
const words = line / 8

// Counts is n counters, each kept per P. The zero value is not usable:
// call New. Add and Value may be called from any number of goroutines.
type Counts struct {
	n      int     // counters
	stride int     // words per P's block: n rounded up to whole lines
	ps     int     // blocks made, one per P below ps
	cells  []int64 // ps blocks, then the spill block, each line-aligned
}

// New returns n counters at zero, with a block for every P that
// GOMAXPROCS or the CPU count allows now.
func New(n int) *Counts {
	if n < 1 {
		n = 1
	}
	ps := max(runtime.GOMAXPROCS(0), runtime.NumCPU())
	stride := (n + words - 1) / words * words
	raw := make([]int64, (ps+1)*stride+words)
	// Start the first block on a line of its own.
	off := 0
	if a := uintptr(unsafe.Pointer(&raw[0])) % line; a != 0 {
		off = int((line - a) / 8)
	}
	return &Counts{n: n, stride: stride, ps: ps, cells: raw[off : off+(ps+1)*stride]}
}

// Len returns the number of counters.
func (c *Counts) Len() int { return c.n }

// Add adds delta to counter i, which must be below Len.
func (c *Counts) Add(i int, delta int64) {
	p := procPin()
	if p < c.ps {
		// Only this P writes this cell, and nothing else runs on it while
		// it is pinned: the load and the store cannot be interleaved with
		// another add.
		w := &c.cells[p*c.stride+i]
		atomic.StoreInt64(w, atomic.LoadInt64(w)+delta)
		procUnpin()
		return
	}
	procUnpin()
	atomic.AddInt64(&c.cells[c.ps*c.stride+i], delta)
}

// Inc adds one to counter i.
func (c *Counts) Inc(i int) { c.Add(i, 1) }

// Value returns counter i: the sum of every P's share. It is not a
// snapshot of all counters at one instant; each add is in it or not.
func (c *Counts) Value(i int) int64 {
	var v int64
	for p := 0; p <= c.ps; p++ {
		v += atomic.LoadInt64(&c.cells[p*c.stride+i])
	}
	return v
}

// AddSat adds delta ≥ 0 to counter i, saturating: a counter that would
// pass math.MaxInt64 stays there. Read it with ValueSat. For a counter
// of costs a client chooses (a request's hits), which plain Add would
// wrap into negative figures.
func (c *Counts) AddSat(i int, delta int64) {
	if delta <= 0 {
		return
	}
	p := procPin()
	if p < c.ps {
		w := &c.cells[p*c.stride+i]
		atomic.StoreInt64(w, satAdd(atomic.LoadInt64(w), delta))
		procUnpin()
		return
	}
	procUnpin()
	w := &c.cells[c.ps*c.stride+i]
	for {
		old := atomic.LoadInt64(w)
		if atomic.CompareAndSwapInt64(w, old, satAdd(old, delta)) {
			return
		}
	}
}

// ValueSat returns counter i, kept by AddSat: the sum of every P's
// share, saturating at math.MaxInt64.
func (c *Counts) ValueSat(i int) int64 {
	var v int64
	for p := 0; p <= c.ps; p++ {
		v = satAdd(v, atomic.LoadInt64(&c.cells[p*c.stride+i]))
	}
	return v
}

// satAdd is a + b for a, b ≥ 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}
