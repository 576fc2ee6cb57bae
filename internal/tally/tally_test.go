package tally

import (
	"math"
	"runtime"
	"sync"
	"testing"
	"unsafe"
)

// TestExactUnderContention adds from many more goroutines than cores, with
// GOMAXPROCS above the core count, and expects every add in the sum.
func TestExactUnderContention(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(8, 2*runtime.NumCPU())))
	c := New(3)
	const goroutines, adds = 64, 20_000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range adds {
				c.Inc(k % 3)
				if k%1000 == 0 {
					runtime.Gosched()
				}
			}
			c.Add(g%3, -1)
		}()
	}
	// Read while adding: a reader must never see a counter go down by more
	// than the -1 each goroutine adds once.
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := int64(0)
		for range 1000 {
			v := c.Value(0)
			if v < last-goroutines {
				t.Errorf("counter 0 went from %d to %d", last, v)
				return
			}
			last = max(last, v)
		}
	}()
	wg.Wait()
	<-done
	total := int64(0)
	for i := range 3 {
		total += c.Value(i)
	}
	if want := int64(goroutines*adds - goroutines); total != want {
		t.Fatalf("sum of counters = %d, want %d", total, want)
	}
	per := int64(goroutines * adds / 3)
	for i := range 3 {
		if v := c.Value(i); v < per-goroutines || v > per+goroutines {
			t.Errorf("counter %d = %d, want about %d", i, v, per)
		}
	}
}

// TestSpill raises GOMAXPROCS past the blocks New made: the Ps beyond them
// add to the spill block, and nothing is lost.
func TestSpill(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	c := New(1)
	if c.ps < 1 {
		t.Fatalf("%d blocks", c.ps)
	}
	runtime.GOMAXPROCS(c.ps + 8)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10_000 {
				c.Inc(0)
			}
		}()
	}
	wg.Wait()
	if v := c.Value(0); v != 320_000 {
		t.Fatalf("Value = %d, want 320000", v)
	}
}

// TestLayout checks that every P's block starts a cache line, so that no
// two Ps write one line, and that counters are apart from each other's
// blocks.
func TestLayout(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 18} {
		c := New(n)
		if c.Len() < 1 || c.Len() < n {
			t.Fatalf("New(%d).Len() = %d", n, c.Len())
		}
		if c.stride%words != 0 || c.stride < c.n {
			t.Fatalf("New(%d): stride %d", n, c.stride)
		}
		for p := 0; p <= c.ps; p++ {
			if a := uintptr(unsafe.Pointer(&c.cells[p*c.stride])) % line; a != 0 {
				t.Fatalf("New(%d): block %d is %d bytes into a line", n, p, a)
			}
		}
	}
}

func TestAddAllocatesNothing(t *testing.T) {
	c := New(2)
	if n := testing.AllocsPerRun(1000, func() { c.Inc(1) }); n != 0 {
		t.Fatalf("Inc allocates %v times", n)
	}
}

func BenchmarkInc(b *testing.B) {
	c := New(4)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc(1)
		}
	})
}

func BenchmarkIncOne(b *testing.B) {
	c := New(4)
	for b.Loop() {
		c.Inc(1)
	}
}

// TestSaturates: AddSat's counters stop at math.MaxInt64, on a P's block
// and on the spill block, and ValueSat's sum of the blocks does too.
func TestSaturates(t *testing.T) {
	c := New(2)
	c.AddSat(0, 1<<62)
	c.AddSat(0, 1<<62)
	c.AddSat(0, math.MaxInt64)
	c.AddSat(0, -5) // ignored: only costs of 0 or more count
	if v := c.ValueSat(0); v != math.MaxInt64 {
		t.Fatalf("after 2^62 twice and MaxInt64: %d", v)
	}
	// The spill block, and a sum across blocks that would wrap.
	for _, w := range []*int64{&c.cells[c.ps*c.stride+1], &c.cells[1]} {
		*w = math.MaxInt64 - 1
	}
	c.AddSat(1, 3)
	if v := c.ValueSat(1); v != math.MaxInt64 {
		t.Fatalf("two blocks near MaxInt64: %d", v)
	}
	if v := c.ValueSat(0); v != math.MaxInt64 {
		t.Fatalf("counter 0 moved: %d", v)
	}
}
