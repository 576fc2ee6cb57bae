package window

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/twintest"
	"github.com/floodgate-go/floodgate/internal/word"
)

// windowFamily is a window rule's twins as the eviction tests take them.
func windowFamily(p Params, name string) twintest.Family {
	slack := int64(0)
	if p.kind == Sliding {
		slack = 1 // its debt held as a weighted count: at most one more at the eviction
	}
	return twintest.Family{
		Name: name, Limit: p.limit, Period: p.period,
		New: []func(int64) twintest.Evicter{
			func(now int64) twintest.Evicter { return New(p, now) },
			func(now int64) twintest.Evicter { return NewMutex(p, now) },
		},
		Spent: []func(int64, int64, int64) twintest.Evicter{
			func(now, spent, owed int64) twintest.Evicter { return NewSpent(p, now, spent, owed) },
			func(now, spent, owed int64) twintest.Evicter { return NewMutexSpent(p, now, spent, owed) },
		},
		Succ: func(s twintest.Evicter, now int64) twintest.Evicter {
			switch w := s.(type) {
			case *Window:
				return w.Successor(now)
			case *MutexWindow:
				return w.Successor(now)
			}
			panic("unknown window")
		},
		Original: func(now int64) twintest.Evicter { return NewMutex(p, now) },
		Charged:  func(t int64, _ twintest.Decision) int64 { return t },
		ClosedAhead: func(orig twintest.Evicter, now int64) bool {
			m := orig.(*MutexWindow)
			ks, curr, prev := p.unpack(m.word)
			return p.kind == Sliding && curr == 0 && prev == 0 && m.origin+ks > p.Origin(now)
		},
		OwedExact: p.kind == Fixed,
		OwedSlack: slack,
	}
}

// windowFamilies are the rules the eviction tests run: both window kinds,
// with small and large limits and periods.
func windowFamilies(t *testing.T) []twintest.Family {
	var fs []twintest.Family
	for _, k := range kinds {
		for _, rule := range []struct {
			limit  int64
			period time.Duration
		}{{1, time.Second}, {5, time.Second}, {7, 3 * time.Millisecond}, {100, time.Minute}, {3, 7}} {
			fs = append(fs, windowFamily(mustParams(t, k.kind, rule.limit, rule.period), k.name))
		}
	}
	return fs
}

// TestEvictSpent: see twintest.EvictSpent.
func TestEvictSpent(t *testing.T) {
	twintest.EvictSpent(t, rand.New(rand.NewPCG(41, 42)), windowFamilies(t))
}

// TestSpentBeforeNow: with spent at or before now, each spent
// constructor makes what the plain one makes.
func TestSpentBeforeNow(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for _, k := range kinds {
		p := mustParams(t, k.kind, 5, time.Second)
		for range 200 {
			now := r.Int64N(1<<50) - 1<<49
			spent := now - r.Int64N(1<<40)
			if r.IntN(4) == 0 {
				spent = now
			} else if r.IntN(4) == 0 {
				spent = math.MinInt64
			}
			if a, b := NewSpent(p, now, spent, 3), New(p, now); a.origin != b.origin || a.p != b.p || a.word.Load() != b.word.Load() {
				t.Fatalf("NewSpent(%d, %d) differs from New", now, spent)
			}
			if a, b := NewMutexSpent(p, now, spent, 3), NewMutex(p, now); a.origin != b.origin || a.p != b.p || a.word != b.word {
				t.Fatalf("NewMutexSpent(%d, %d) differs from NewMutex", now, spent)
			}
		}
	}
}

// TestSpentWord: a window state made spent holds the word NewWord gives at
// its origin, also when that origin had to move forward.
func TestSpentWord(t *testing.T) {
	const T = int64(time.Second)
	for _, k := range kinds {
		p := mustParams(t, k.kind, 1_000_000, time.Second) // the fewest index bits
		for _, spent := range []int64{5 * T, 6 * T, 7 * T, 7*T + 3, p.maxRel * T, (p.maxRel + 5) * T, (2*p.maxRel + 9) * T, math.MaxInt64} {
			now := 5*T + 1
			s, m := NewSpent(p, now, spent, 0), NewMutexSpent(p, now, spent, 0)
			if s.origin != m.origin || s.word.Load() != m.word {
				t.Fatalf("%s spent %d: the twins differ", k.name, spent)
			}
			if w, st := p.NewWord(s.origin, now, now, spent, 0); st == word.Live && w != m.word {
				t.Fatalf("%s spent %d: word %#x, NewWord %#x", k.name, spent, m.word, w)
			}
			// It is new from the last window boundary at or before spent,
			// and full in the window before (sliding: at its start, where
			// the window before that still weighs N).
			edge := spent / T * T
			if edge <= now {
				continue
			}
			if got, _ := NewSpent(p, now, spent, 0).Evict(now); got != edge {
				t.Fatalf("%s made at %d from %d: Evict reports %d, want %d", k.name, now, spent, got, edge)
			}
			full := edge - 1
			if k.kind == Sliding {
				full = edge - T
			}
			if d, _ := s.Peek(full); full >= now && d.Allowed {
				t.Fatalf("%s made from %d: admits at %d", k.name, spent, full)
			}
			if d, _ := s.Peek(edge); !d.Allowed || d.Remaining != p.limit-1 {
				t.Fatalf("%s made from %d: not new at %d: %+v", k.name, spent, edge, d)
			}
		}
	}
}

// TestEvictConcurrent: see twintest.EvictConcurrent. A window evicted at
// 7⅓ s is new from the end of its window (fixed), or of the next
// (sliding, whose count still weighs there).
func TestEvictConcurrent(t *testing.T) {
	const T = int64(time.Second)
	var fs []twintest.Family
	for _, k := range kinds {
		fs = append(fs, windowFamily(mustParams(t, k.kind, 1000, time.Second), k.name))
	}
	twintest.EvictConcurrent(t, fs, 7*T+T/3, map[string]int64{"fixed": 8 * T, "sliding": 9 * T})
}

// TestConvertSpent: what a key evicted under one rule is remembered as
// under another after a change at at owes what the state made again owes
// at at, converted as ConvertTo converts a held state's debt, and is
// spent no sooner than that converted state; a later instant never
// converts to an earlier one, whatever the debts (the sketch converts
// cell by cell, and a key reads the earlier of its two).
func TestConvertSpent(t *testing.T) {
	const T = int64(time.Second)
	r := rand.New(rand.NewPCG(45, 46))
	for _, k := range kinds {
		for range 2000 {
			p := mustParams(t, k.kind, 1+r.Int64N(20), time.Duration(1+r.Int64N(3))*time.Second)
			q := mustParams(t, k.kind, 1+r.Int64N(20), time.Duration(1+r.Int64N(3))*time.Second/2)
			at := 100*T + r.Int64N(3*T)
			s1 := at + r.Int64N(4*T) - T/2
			s2 := s1 + r.Int64N(2*T)
			o1, o2 := r.Int64N(3*p.limit), r.Int64N(3*p.limit)
			c1, w1 := p.ConvertSpent(s1, o1, at, &q)
			c2, _ := p.ConvertSpent(s2, o2, at, &q)
			if s2 > at && c2 < c1 {
				t.Fatalf("%s: %d converts to %d, the later %d to %d", k.name, s1, c1, s2, c2)
			}
			if s1 <= at {
				if c1 != s1 || w1 != 0 {
					t.Fatalf("%s: %d, before the change at %d, converts to %d owing %d", k.name, s1, at, c1, w1)
				}
				continue
			}
			made := NewMutexSpent(p, at, s1, o1)
			dm, _ := made.Peek(at)
			conv := made.ConvertTo(at, q)
			dc, _ := conv.Peek(at)
			spent, _ := conv.Evict(at)
			if dc.Owed != dm.Owed && dc.Owed != q.MaxCount()-q.limit || w1 != dc.Owed || c1 < spent {
				t.Fatalf("%s %d/%d to %d/%d at %d: %d owing %d converts to %d owing %d; the state made again owes %d, converted %d and is spent until %d",
					k.name, p.limit, p.period, q.limit, q.period, at, s1, o1, c1, w1, dm.Owed, dc.Owed, spent)
			}
		}
	}
}
