package floodgate

import (
	"math"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/flat"
)

// TestSweeperKeepsDebt: the sweeper (IdleTTL) never evicts a key that
// owes, however long it has been idle: it answers as no new key does at
// the sweep's instant. It evicts it once the debt is paid and the key
// full again.
func TestSweeperKeepsDebt(t *testing.T) {
	for _, alg := range []string{TokenBucket, FixedWindow, SlidingCounter, SlidingLog} {
		clock := NewManualClock(int64(time.Hour))
		l, err := New(Config{Algorithm: alg, Rule: Rule{Limit: 10, Period: time.Second}, Clock: clock, IdleTTL: Never})
		if err != nil {
			t.Fatal(err)
		}
		tick := make(chan time.Time)
		done := make(chan int)
		l.startSweep(100*time.Millisecond, tick, done)
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
	s := newSketch(1, nil)
	a := flat.ID{Hi: 3<<32 | 1, Lo: 5}
	b := flat.ID{Hi: 3<<32 | 1, Lo: 6} // shares a's second cell
	c := flat.ID{Hi: 4<<32 | 1, Lo: 5} // shares a's first cell
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

// TestSketchChangeOfRule: while SetRule is under way, a key evicted under
// the new rule goes to a sketch of its own, whose prev is the old rule's;
// one evicted under the old rule still goes to the old rule's; a key of
// the new rule reads both, the old converted. settle converts the old
// into the new and drops it.
func TestSketchChangeOfRule(t *testing.T) {
	clock := NewManualClock(int64(time.Hour))
	l, err := New(Config{Algorithm: FixedWindow, Rule: Rule{Limit: 10, Period: time.Second}, Clock: clock, MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	old := l.rules.Load()
	a, b := flat.ID{Hi: 1<<32 | 1, Lo: 1}, flat.ID{Hi: 2<<32 | 1, Lo: 2}
	const T = int64(time.Second)
	l.sketch.record(a, old, int64(time.Hour)+T, 25) // owes 25 to the end of its window

	alg, err := build(FixedWindow, mustFactory(t, FixedWindow), Rule{Limit: 4, Period: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	next := newRuleSet(Rule{Limit: 4, Period: 2 * time.Second}, alg)
	next.changed, next.at, next.gen = true, int64(time.Hour)+T/2, old.gen+1
	// No key evicted under next yet: a key of next reads a's converted.
	if at, owed := l.sketch.memory(a, next); at != int64(time.Hour)+2*T || owed != 25 {
		t.Fatalf("a under the new rule reads %d owing %d, want the new window's end owing 25", at, owed)
	}
	l.sketch.record(b, next, int64(time.Hour)+2*T, 3)
	h := l.sketch.p.Load()
	if h.rs != next || h.prev.Load() == nil || h.prev.Load().rs != old {
		t.Fatal("a key evicted under the new rule did not make its sketch, with the old as prev")
	}
	l.sketch.record(b, old, int64(time.Hour)+T, 2) // evicted under the old rule meanwhile
	if at, owed := l.sketch.memory(b, old); at != int64(time.Hour)+T || owed != 2 {
		t.Fatalf("b under the old rule reads %d owing %d", at, owed)
	}
	if at, owed := l.sketch.memory(b, next); at != int64(time.Hour)+2*T || owed != 3 {
		t.Fatalf("b under the new rule reads %d owing %d, want its own 3 (the old 2 converts to 2)", at, owed)
	}
	l.sketch.settle(next)
	if h := l.sketch.p.Load(); h.rs != next || h.prev.Load() != nil {
		t.Fatal("settle left the old sketch")
	}
	if at, owed := l.sketch.memory(a, next); at != int64(time.Hour)+2*T || owed != 25 {
		t.Fatalf("a after settle reads %d owing %d", at, owed)
	}
}

func mustFactory(t *testing.T, name string) factory {
	t.Helper()
	f, err := lookup(name, false)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
