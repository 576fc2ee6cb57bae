package floodgate

import (
	"math"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/registry"
)

// TestSweeperKeepsDebt: the sweeper (IdleTTL) never evicts a key that
// owes, however long it has been idle: it answers as no new key does at
// the sweep's instant. It evicts it once the debt is paid and the key
// full again.
func TestSweeperKeepsDebt(t *testing.T) {
	for _, alg := range []string{TokenBucket, FixedWindow, SlidingCounter, SlidingLog} {
		clock := NewManualClock(int64(time.Hour))
		l, err := New(Config{Algorithm: alg, Rule: Rule{Limit: 10, Period: time.Second}, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		tick := make(chan time.Time)
		done := make(chan int)
		l.stop, l.swept = make(chan struct{}), make(chan struct{})
		go l.sweep(100*time.Millisecond, tick, done)
		if _, err := l.Charge("d", 30); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			clock.Advance(100 * time.Millisecond)
			owed := l.Peek("d").Owed
			tick <- time.Time{}
			if n := <-done; n != 0 || owed == 0 || l.Peek("d").Owed != owed {
				t.Fatalf("%s: swept %d keys of one that owed %d, and owes %d after", alg, n, owed, l.Peek("d").Owed)
			}
		}
		clock.Advance(3 * time.Second)
		tick <- time.Time{}
		if n := <-done; n != 1 || l.Len() != 0 {
			t.Fatalf("%s: swept %d once the debt was paid, Len %d", alg, n, l.Len())
		}
		l.Close()
	}
}

// TestSketchDebt: a cell remembers the debt of the keys evicted at its
// instant, the largest of them, and forgets it when a later instant takes
// the cell; a key reads the debt of the instant it reads.
func TestSketchDebt(t *testing.T) {
	s := newSketch(1)
	a := registry.ID{Hi: 3<<32 | 1, Lo: 5}
	b := registry.ID{Hi: 3<<32 | 1, Lo: 6} // shares a's second cell
	c := registry.ID{Hi: 4<<32 | 1, Lo: 5} // shares a's first cell
	if at, owed := s.read(a); at != math.MinInt64 || owed != 0 || s.owed.Load() != nil {
		t.Fatalf("an empty sketch reads %d owing %d", at, owed)
	}
	s.record(a, 100, 0)
	if s.owed.Load() != nil {
		t.Fatal("the debts were made before any key owed")
	}
	s.record(a, 200, 7)
	if at, owed := s.read(a); at != 200 || owed != 7 {
		t.Fatalf("a reads %d owing %d, want 200 owing 7", at, owed)
	}
	s.record(b, 200, 9) // the same instant in a's second cell: the larger debt
	if at, owed := s.read(a); at != 200 || owed != 7 {
		t.Fatalf("a reads %d owing %d: its first cell holds its own debt, 7", at, owed)
	}
	s.record(c, 200, 12) // and in its first
	if at, owed := s.read(a); at != 200 || owed != 9 {
		t.Fatalf("a reads %d owing %d: the smaller of its cells' debts at 200 is 9", at, owed)
	}
	s.record(b, 300, 0) // a later instant takes the second cell, owing nothing
	s.record(c, 300, 0)
	if at, owed := s.read(a); at != 300 || owed != 0 {
		t.Fatalf("a reads %d owing %d: both its cells were taken by 300, owing nothing", at, owed)
	}
	s.record(a, 250, 40) // an earlier instant leaves the cells as they are
	if at, owed := s.read(a); at != 300 || owed != 0 {
		t.Fatalf("a reads %d owing %d after an earlier record", at, owed)
	}
}
