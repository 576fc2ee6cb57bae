package shardlog

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/twintest"
)

// logFamily is a log rule's twins as the eviction tests take them.
func logFamily(p Params) twintest.Family {
	f := twintest.Family{
		Name: "log", Limit: p.limit, Period: p.period,
		New:   []func(int64) twintest.Evicter{func(now int64) twintest.Evicter { return NewMutex(p, now) }},
		Spent: []func(int64, int64, int64) twintest.Evicter{func(now, spent, owed int64) twintest.Evicter { return NewMutexSpent(p, now, spent, owed) }},
		Succ: func(s twintest.Evicter, now int64) twintest.Evicter {
			switch l := s.(type) {
			case *Log:
				return l.Successor(now)
			case *MutexLog:
				return l.Successor(now)
			}
			panic("unknown log")
		},
		Original: func(now int64) twintest.Evicter { return NewMutex(p, now) },
		Charged: func(t int64, d twintest.Decision) int64 {
			return t + int64(d.ResetAfter) - p.period // ResetAfter of a grant: charged + T − t
		},
		ClosedAhead: func(twintest.Evicter, int64) bool { return false },
	}
	if lockFreeLog {
		f.New = append(f.New, func(now int64) twintest.Evicter { return New(p, now) })
		f.Spent = append(f.Spent, func(now, spent, owed int64) twintest.Evicter { return NewSpent(p, now, spent, owed) })
	}
	return f
}

// TestEvictSpent: see twintest.EvictSpent, on logs with small and large
// limits and periods.
func TestEvictSpent(t *testing.T) {
	var fs []twintest.Family
	for _, rule := range []struct {
		limit  int64
		period time.Duration
	}{{1, 10}, {3, time.Second}, {16, time.Millisecond}, {100, time.Minute}} {
		fs = append(fs, logFamily(mustParams(t, rule.limit, rule.period)))
	}
	twintest.EvictSpent(t, rand.New(rand.NewPCG(41, 42)), fs)
}

// TestSpentBeforeNow: with spent at or before now, each spent
// constructor makes what the plain one makes.
func TestSpentBeforeNow(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	lp := mustParams(t, 5, time.Second)
	for range 400 {
		now := r.Int64N(1<<50) - 1<<49
		spent := now - r.Int64N(1<<40)
		if r.IntN(4) == 0 {
			spent = now
		} else if r.IntN(4) == 0 {
			spent = math.MinInt64
		}
		if a, b := NewMutexSpent(lp, now, spent, 2), NewMutex(lp, now); a.newest != b.newest || len(a.entries) != 0 || a.total != 0 {
			t.Fatalf("NewMutexSpent(%d, %d) differs from NewMutex", now, spent)
		}
		if lockFreeLog {
			a, b := NewSpent(lp, now, spent, 2).ring.Load(), New(lp, now).ring.Load()
			if a.capacity() != b.capacity() || a.hint.Load() != b.hint.Load() {
				t.Fatalf("NewSpent(%d, %d) differs from New", now, spent)
			}
			as, bs := a.entries(), b.entries()
			for i := range as {
				if as[i].ts.Load() != bs[i].ts.Load() || as[i].meta.Load() != bs[i].meta.Load() {
					t.Fatalf("NewSpent(%d, %d) differs from New in slot %d", now, spent, i)
				}
			}
		}
	}
}

// TestEvictLogTable: the instants the logs report on a few known states.
func TestEvictLogTable(t *testing.T) {
	p, p5 := mustParams(t, 3, 100), mustParams(t, 5, 100)
	for _, m := range logMakers(t) {
		ev := func(s twin, now int64) int64 { spent, _ := s.(twintest.Evicter).Evict(now); return spent }
		if got := ev(m.new(p, 0), 0); got != 0 {
			t.Errorf("%s: a new log, closed before 0, reports %d", m.name, got)
		}
		if got := ev(m.new(p, 50), 10); got != 50 {
			t.Errorf("%s: a log made at 50, evicted at 10, is new from 50: got %d", m.name, got)
		}
		s := m.new(p5, 0)
		s.AllowN(10, 1)
		s.AllowN(20, 2)
		s.AllowN(30, 1)
		s.Refund(30, 1) // the newest entry carries no cost: 20 is the newest that does
		if got := ev(s, 40); got != 120 {
			t.Errorf("%s: entries at 10 and 20, evicted at 40: got %d, want 120", m.name, got)
		}
		s = m.new(p, 0)
		s.AllowN(10, 1)
		if got := ev(s, 150); got != 110 {
			t.Errorf("%s: the entry at 10 leaves at 110, in the past at 150: got %d", m.name, got)
		}
		// A reading from the past finds the window at the newest entry.
		s = m.new(p, 0)
		s.AllowN(100, 1)
		if got := ev(s, 5); got != 200 {
			t.Errorf("%s: an entry at 100, evicted at 5: got %d, want 200", m.name, got)
		}
	}
	for _, m := range []func(now, spent int64) twin{
		func(now, spent int64) twin { return NewMutexSpent(p, now, spent, 0) },
		func(now, spent int64) twin { return NewSpent(p, now, spent, 0) },
	}[:len(logMakers(t))] {
		s := m(40, 120)
		if d, _ := s.AllowN(119, 1); d.Allowed || d.RetryAfter != 1 || d.Remaining != 0 {
			t.Errorf("spent until 120: at 119 %+v", d)
		}
		if d, _ := s.AllowN(60, 1); d.Allowed || d.RetryAfter != 60 {
			t.Errorf("spent until 120: at 60 %+v", d)
		}
		if d, _ := s.AllowN(120, 3); !d.Allowed {
			t.Errorf("spent until 120: at 120 %+v", d)
		}
		// Near the clock's first instant the entry cannot be charged at
		// spent − T: it is charged at the first instant, and refuses
		// longer, never shorter.
		s = m(math.MinInt64, math.MinInt64+50)
		if d, _ := s.AllowN(math.MinInt64+60, 1); d.Allowed {
			t.Errorf("spent until the first instant + 50: at +60 %+v", d)
		}
		if got, _ := s.(twintest.Evicter).Evict(math.MinInt64 + 60); got != math.MinInt64+100 {
			t.Errorf("first instant: Evict = %d", got)
		}
	}
}

// TestEvictConcurrent: see twintest.EvictConcurrent. A log evicted at
// 7⅓ s, every entry at that instant, is new a period later.
func TestEvictConcurrent(t *testing.T) {
	const T = int64(time.Second)
	const now = 7*T + T/3
	fs := []twintest.Family{logFamily(mustParams(t, 1000, time.Second))}
	twintest.EvictConcurrent(t, fs, now, map[string]int64{"log": now + T})
}

// TestConvertSpent: what a key evicted under one rule is remembered as
// under another after a change at at is the state made again converted
// as ConvertTo converts a log (holding nothing, owing what it owed), and
// a later instant never converts to an earlier one.
func TestConvertSpent(t *testing.T) {
	const T = int64(time.Second)
	r := rand.New(rand.NewPCG(47, 48))
	for range 2000 {
		p := mustParams(t, 1+r.Int64N(20), time.Duration(1+r.Int64N(3))*time.Second)
		q := mustParams(t, 1+r.Int64N(20), time.Duration(1+r.Int64N(3))*time.Second/2)
		at := 100*T + r.Int64N(3*T)
		s1 := at + r.Int64N(4*T) - T/2
		s2 := s1 + r.Int64N(2*T)
		o1, o2 := r.Int64N(3*p.limit), r.Int64N(3*p.limit)
		c1, w1 := p.ConvertSpent(s1, o1, at, &q)
		if c2, _ := p.ConvertSpent(s2, o2, at, &q); s2 > at && c2 < c1 {
			t.Fatalf("%d converts to %d, the later %d to %d", s1, c1, s2, c2)
		}
		if s1 <= at {
			if c1 != s1 || w1 != 0 {
				t.Fatalf("%d, before the change at %d, converts to %d owing %d", s1, at, c1, w1)
			}
			continue
		}
		conv := NewMutexSpent(p, at, s1, o1).ConvertTo(at, q)
		dc, _ := conv.Peek(at)
		spent, owed := conv.Evict(at)
		if c1 != spent || w1 != owed || w1 != dc.Owed {
			t.Fatalf("%d/%d to %d/%d at %d: %d owing %d converts to %d owing %d; the state made again, converted, %d owing %d (%+v)",
				p.limit, p.period, q.limit, q.period, at, s1, o1, c1, w1, spent, owed, dc)
		}
	}
}
