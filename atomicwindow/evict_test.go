package atomicwindow

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
