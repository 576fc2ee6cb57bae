package shardedlog

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/word"
)

// evicter is a twin that can also be evicted.
type evicter interface {
	twin
	Evict(now int64) int64
}

// family is one algorithm's pair of twins, with what the eviction tests
// need of it: the plain and the spent constructors, the successor, and an
// original, a third copy that is never evicted.
type family struct {
	name     string
	limit    int64
	period   int64
	new      []func(now int64) evicter
	spent    []func(now, spent int64) evicter
	succ     func(s evicter, now int64) evicter
	original func(now int64) evicter
	// charged maps a request the made state admitted at t to the reading
	// at which the original is asked the same: the log charges a request
	// at its newest entry's time when that is later than t.
	charged func(t int64, d Decision) int64
	// closedAhead reports an original that, at now, holds no count and is
	// closed before a window after now's. See TestEvictSpent.
	closedAhead func(orig evicter, now int64) bool
}

func windowFamily(p Params, name string) family {
	return family{
		name: name, limit: p.limit, period: p.period,
		new: []func(int64) evicter{
			func(now int64) evicter { return New(p, now) },
			func(now int64) evicter { return NewMutex(p, now) },
		},
		spent: []func(int64, int64) evicter{
			func(now, spent int64) evicter { return NewSpent(p, now, spent) },
			func(now, spent int64) evicter { return NewMutexSpent(p, now, spent) },
		},
		succ: func(s evicter, now int64) evicter {
			switch w := s.(type) {
			case *Window:
				return w.Successor(now)
			case *MutexWindow:
				return w.Successor(now)
			}
			panic("unknown window")
		},
		original: func(now int64) evicter { return NewMutex(p, now) },
		charged:  func(t int64, _ Decision) int64 { return t },
		closedAhead: func(orig evicter, now int64) bool {
			m := orig.(*MutexWindow)
			ks, curr, prev := p.unpack(m.word)
			return p.kind == Sliding && curr == 0 && prev == 0 && m.origin+ks > p.Origin(now)
		},
	}
}

func logFamily(p LogParams) family {
	f := family{
		name: "log", limit: p.limit, period: p.period,
		new:   []func(int64) evicter{func(now int64) evicter { return NewMutexLog(p, now) }},
		spent: []func(int64, int64) evicter{func(now, spent int64) evicter { return NewMutexLogSpent(p, now, spent) }},
		succ: func(s evicter, now int64) evicter {
			switch l := s.(type) {
			case *Log:
				return l.Successor(now)
			case *MutexLog:
				return l.Successor(now)
			}
			panic("unknown log")
		},
		original: func(now int64) evicter { return NewMutexLog(p, now) },
		charged: func(t int64, d Decision) int64 {
			return t + int64(d.ResetAfter) - p.period // ResetAfter of a grant: charged + T − t
		},
		closedAhead: func(evicter, int64) bool { return false },
	}
	if lockFreeLog {
		f.new = append(f.new, func(now int64) evicter { return NewLog(p, now) })
		f.spent = append(f.spent, func(now, spent int64) evicter { return NewLogSpent(p, now, spent) })
	}
	return f
}

// evictFamilies are the rules the eviction tests run: both window kinds
// and the log, with small and large limits and periods.
func evictFamilies(t *testing.T) []family {
	var fs []family
	for _, k := range kinds {
		for _, rule := range []struct {
			limit  int64
			period time.Duration
		}{{1, time.Second}, {5, time.Second}, {7, 3 * time.Millisecond}, {100, time.Minute}, {3, 7}} {
			fs = append(fs, windowFamily(mustParams(t, k.kind, rule.limit, rule.period), k.name))
		}
	}
	for _, rule := range []struct {
		limit  int64
		period time.Duration
	}{{1, 10}, {3, time.Second}, {16, time.Millisecond}, {100, time.Minute}} {
		fs = append(fs, logFamily(mustLogParams(t, rule.limit, rule.period)))
	}
	return fs
}

// moveClock moves now by a random step either way: mostly within a
// window, sometimes by a few.
func (f *family) moveClock(r *rand.Rand, now int64) int64 {
	T := f.period
	switch r.IntN(10) {
	case 0:
		return now - r.Int64N(2*T+1)
	case 1:
		return now + r.Int64N(3*T+1)
	case 2, 3:
		return now
	case 4:
		return now - r.Int64N(T/f.limit+2)
	}
	return now + r.Int64N(T/f.limit+2)
}

func (f *family) cost(r *rand.Rand) int64 {
	if r.IntN(30) == 0 {
		return f.limit + 1 - 2*r.Int64N(2) // limit+1, or limit−1
	}
	return 1 + r.Int64N(min(f.limit, 3))
}

// history applies the same random operations to every state and requires
// the same answers: grants, refunds of the grant just made, peeks, idle
// retirement (the states are then replaced by their successors), the
// clock moving both ways. It returns the clock at the end.
func (f *family) history(t *testing.T, r *rand.Rand, now int64, states []evicter, steps int) int64 {
	t.Helper()
	for i := range steps {
		now = f.moveClock(r, now)
		n := f.cost(r)
		switch r.IntN(10) {
		case 0:
			d0, _ := states[0].Peek(now)
			for _, s := range states[1:] {
				if d, _ := s.Peek(now); d != d0 {
					t.Fatalf("%s history step %d Peek(%d): %+v and %+v", f.name, i, now, d0, d)
				}
			}
		case 1:
			idle := states[0].RetireIdle(now)
			for _, s := range states[1:] {
				if s.RetireIdle(now) != idle {
					t.Fatalf("%s history step %d: RetireIdle(%d) differs", f.name, i, now)
				}
			}
			if idle {
				for j, s := range states {
					states[j] = f.succ(s, now)
				}
			}
		default:
			d0, _ := states[0].AllowN(now, n)
			for _, s := range states[1:] {
				if d, _ := s.AllowN(now, n); d != d0 {
					t.Fatalf("%s history step %d AllowN(%d, %d): %+v and %+v", f.name, i, now, n, d0, d)
				}
			}
			if d0.Allowed && r.IntN(4) == 0 {
				for _, s := range states {
					s.Refund(now, n)
				}
			}
		}
	}
	return now
}

// TestEvictSpent drives the twins of each algorithm and a third copy, the
// original, through random histories, then evicts the twins. It requires
// that they report the same instant; that they are retired for good,
// with a new successor; that the states the spent constructors make from
// that instant answer every later request (the clock moving both ways)
// alike; that everything those admit, the original, given the same
// admitted requests, admits too (a key evicted and made again never
// passes more than it would have); and that Evict of a state just made
// so reports the instant back.
func TestEvictSpent(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, f := range evictFamilies(t) {
		var spentLater, admitted, closedAdmits int
		for trial := range 300 {
			now := r.Int64N(1<<40) - 1<<39
			states := make([]evicter, len(f.new)+1)
			for i, mk := range f.new {
				states[i] = mk(now)
			}
			states[len(f.new)] = f.original(now)
			now = f.history(t, r, now, states, r.IntN(40))
			orig := states[len(f.new)]
			twins := states[:len(f.new)]
			// A sliding window that holds no count and is closed before a
			// window K after now's (it was made, or emptied by a refund,
			// at a later reading) reports K·T; the state made from that
			// holds N in window K−2 (see NewWord), which weighs less than
			// N late in window K−1, where the original refuses every
			// reading. The rule still holds (the original held nothing in
			// K−1, at most N in K−2), but the replay does not: for those
			// grants the test requires only that they lie in K−1, and
			// replays the rest (the original, refused them, has room for
			// more, never less).
			closed := f.closedAhead(orig, now)

			spent := twins[0].Evict(now)
			for i, s := range twins[1:] {
				if got := s.Evict(now); got != spent {
					t.Fatalf("%s %d per %d trial %d: twin %d evicted at %d reports %d, twin 0 %d", f.name, f.limit, f.period, trial, i+1, now, got, spent)
				}
			}
			if spent > now {
				spentLater++
			}
			fresh, _ := f.new[0](now).Peek(now)
			for i, s := range twins {
				if again := s.Evict(now); again != math.MinInt64 {
					t.Fatalf("%s twin %d: a second Evict reports %d", f.name, i, again)
				}
				if _, live := s.AllowN(now, 1); live {
					t.Fatalf("%s twin %d: an evicted state granted", f.name, i)
				}
				if d, _ := f.succ(s, now).Peek(now); d != fresh {
					t.Fatalf("%s twin %d: the successor of an evicted state is not new: %+v, want %+v", f.name, i, d, fresh)
				}
			}

			for i, mk := range f.spent {
				if got := mk(now, spent).Evict(now); spent > now && got != spent {
					t.Fatalf("%s %d per %d twin %d: made at %d from %d, Evict reports %d", f.name, f.limit, f.period, i, now, spent, got)
				}
			}

			made := make([]evicter, len(f.spent))
			for i, mk := range f.spent {
				made[i] = mk(now, spent)
			}
			clock := now
			for i := range 40 {
				clock = f.moveClock(r, clock)
				n := f.cost(r)
				if r.IntN(8) == 0 {
					d0, _ := made[0].Peek(clock)
					for j, s := range made[1:] {
						if d, _ := s.Peek(clock); d != d0 {
							t.Fatalf("%s trial %d replay %d Peek(%d): twin 0 %+v, twin %d %+v", f.name, trial, i, clock, d0, j+1, d)
						}
					}
					continue
				}
				d0, live := made[0].AllowN(clock, n)
				if !live {
					t.Fatalf("%s replay %d: a state made spent retired at %d", f.name, i, clock)
				}
				for j, s := range made[1:] {
					if d, _ := s.AllowN(clock, n); d != d0 {
						t.Fatalf("%s %d per %d trial %d replay %d AllowN(%d, %d): twin 0 %+v, twin %d %+v", f.name, f.limit, f.period, trial, i, clock, n, d0, j+1, d)
					}
				}
				if k, _ := floorDivMod(clock, f.period); d0.Allowed && closed && k < spent/f.period {
					if k < spent/f.period-1 {
						t.Fatalf("%s trial %d: evicted at %d (spent %d), admitted at %d", f.name, trial, now, spent, clock)
					}
					closedAdmits++
					continue
				}
				if d0.Allowed {
					admitted++
					at := f.charged(clock, d0)
					if d, _ := orig.AllowN(at, n); !d.Allowed {
						t.Fatalf("%s %d per %d trial %d: evicted at %d (spent %d), the new state admitted (%d, %d), the original would not at %d: %+v",
							f.name, f.limit, f.period, trial, now, spent, clock, n, at, d)
					}
				}
			}
		}
		if spentLater < 50 || admitted < 50 {
			t.Errorf("%s %d per %d: %d evictions of a spent state, %d replayed grants: not exercised", f.name, f.limit, f.period, spentLater, admitted)
		}
		if closedAdmits > 0 {
			t.Logf("%s %d per %d: %d grants late in the window before a closed one, not replayed", f.name, f.limit, f.period, closedAdmits)
		}
	}
}

// TestSpentBeforeNow: with spent at or before now, each spent
// constructor makes what the plain one makes.
func TestSpentBeforeNow(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for _, k := range kinds {
		p := mustParams(t, k.kind, 5, time.Second)
		lp := mustLogParams(t, 5, time.Second)
		for range 200 {
			now := r.Int64N(1<<50) - 1<<49
			spent := now - r.Int64N(1<<40)
			if r.IntN(4) == 0 {
				spent = now
			} else if r.IntN(4) == 0 {
				spent = math.MinInt64
			}
			if a, b := NewSpent(p, now, spent), New(p, now); a.origin != b.origin || a.p != b.p || a.word.Load() != b.word.Load() {
				t.Fatalf("NewSpent(%d, %d) differs from New", now, spent)
			}
			if a, b := NewMutexSpent(p, now, spent), NewMutex(p, now); a.origin != b.origin || a.p != b.p || a.word != b.word {
				t.Fatalf("NewMutexSpent(%d, %d) differs from NewMutex", now, spent)
			}
			if a, b := NewMutexLogSpent(lp, now, spent), NewMutexLog(lp, now); a.newest != b.newest || len(a.entries) != 0 || a.total != 0 {
				t.Fatalf("NewMutexLogSpent(%d, %d) differs from NewMutexLog", now, spent)
			}
			if lockFreeLog {
				a, b := NewLogSpent(lp, now, spent).ring.Load(), NewLog(lp, now).ring.Load()
				if a.capacity() != b.capacity() || a.hint.Load() != b.hint.Load() {
					t.Fatalf("NewLogSpent(%d, %d) differs from NewLog", now, spent)
				}
				as, bs := a.entries(), b.entries()
				for i := range as {
					if as[i].ts.Load() != bs[i].ts.Load() || as[i].meta.Load() != bs[i].meta.Load() {
						t.Fatalf("NewLogSpent(%d, %d) differs from NewLog in slot %d", now, spent, i)
					}
				}
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
			s, m := NewSpent(p, now, spent), NewMutexSpent(p, now, spent)
			if s.origin != m.origin || s.word.Load() != m.word {
				t.Fatalf("%s spent %d: the twins differ", k.name, spent)
			}
			if w, st := p.NewWord(s.origin, now, now, spent); st == word.Live && w != m.word {
				t.Fatalf("%s spent %d: word %#x, NewWord %#x", k.name, spent, m.word, w)
			}
			// It is new from the last window boundary at or before spent,
			// and full in the window before (sliding: at its start, where
			// the window before that still weighs N).
			edge := spent / T * T
			if edge <= now {
				continue
			}
			if got := NewSpent(p, now, spent).Evict(now); got != edge {
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

// TestEvictLogTable: the instants the logs report on a few known states.
func TestEvictLogTable(t *testing.T) {
	p, p5 := mustLogParams(t, 3, 100), mustLogParams(t, 5, 100)
	for _, m := range logMakers(t) {
		ev := func(s twin, now int64) int64 { return s.(evicter).Evict(now) }
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
		func(now, spent int64) twin { return NewMutexLogSpent(p, now, spent) },
		func(now, spent int64) twin { return NewLogSpent(p, now, spent) },
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
		if got := s.(evicter).Evict(math.MinInt64 + 60); got != math.MinInt64+100 {
			t.Errorf("first instant: Evict = %d", got)
		}
	}
}

// TestEvictConcurrent evicts each twin while 32 goroutines take at a
// frozen clock: what landed before the eviction is within the limit, the
// instant reported is where the window it landed in stops weighing, and
// the state made from it refuses at once.
func TestEvictConcurrent(t *testing.T) {
	const T = int64(time.Second)
	const now = 7*T + T/3
	var fs []family
	for _, k := range kinds {
		fs = append(fs, windowFamily(mustParams(t, k.kind, 1000, time.Second), k.name))
	}
	fs = append(fs, logFamily(mustLogParams(t, 1000, time.Second)))
	want := map[string]int64{"fixed": 8 * T, "sliding": 9 * T, "log": now + T}
	for _, f := range fs {
		for i, mk := range f.new {
			for range 10 {
				s := mk(now)
				var granted atomic.Int64
				var wg sync.WaitGroup
				for range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							ok, live := s.Take(now, 1)
							if !live {
								return
							}
							if ok {
								granted.Add(1)
							}
						}
					}()
				}
				for granted.Load() < 300 {
					runtime.Gosched()
				}
				spent := s.Evict(now)
				wg.Wait()
				if g := granted.Load(); g > f.limit || spent != want[f.name] {
					t.Fatalf("%s twin %d: %d granted, Evict reports %d, want %d", f.name, i, g, spent, want[f.name])
				}
				if ok, _ := f.spent[i](now, spent).Take(now, 1); ok {
					t.Fatalf("%s twin %d: the state made from %d admits at %d", f.name, i, spent, now)
				}
			}
		}
	}
}
