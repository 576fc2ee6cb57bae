package bucket

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/twintest"
)

// evicter is a twin that can also be evicted.
type evicter interface {
	twin
	Evict(now int64) int64
}

type spentMaker struct {
	name  string
	new   func(p Params, now int64) evicter
	spent func(p Params, now, spent int64) evicter
}

// spentTwins are the three implementations with their constructors of a
// spent state.
var spentTwins = []spentMaker{
	{"lockfree", func(p Params, now int64) evicter { return New(p, now) },
		func(p Params, now, spent int64) evicter { return NewSpent(p, now, spent) }},
	{"mutex", func(p Params, now int64) evicter { return NewMutex(p, now) },
		func(p Params, now, spent int64) evicter { return NewMutexSpent(p, now, spent) }},
	{"leaky", func(p Params, now int64) evicter { return NewLeakyMutex(p, now) },
		func(p Params, now, spent int64) evicter { return NewLeakyMutexSpent(p, now, spent) }},
}

var evictRules = []struct {
	limit  int64
	period time.Duration
	burst  int64
}{
	{10, time.Second, 0}, {10, time.Second, 3}, {3, time.Second, 5}, {7, time.Minute, 0},
	{1000, time.Millisecond, 1}, {999_983, time.Millisecond, 0}, {6, 7, 2},
}

// moveClock moves now by a random step either way: mostly within the
// burst window, sometimes by several.
func moveClock(r *rand.Rand, p Params, now int64) int64 {
	span := p.tau()/p.scale + 2
	switch r.IntN(8) {
	case 0:
		return now - r.Int64N(span)
	case 1:
		return now + r.Int64N(3*span)
	case 2, 3:
		return now
	}
	return now + r.Int64N(span/max(1, p.capacity)+2) - 1
}

func randCost(r *rand.Rand, p Params) int64 {
	if r.IntN(30) == 0 {
		return p.capacity + 1 - 2*r.Int64N(2) // capacity+1 or capacity-1
	}
	return 1 + r.Int64N(min(p.capacity, 4))
}

// history applies the same random operations to every state and requires
// the same answers; an idle retirement replaces the states with their
// successors. It returns the clock at the end.
func history(t *testing.T, r *rand.Rand, p Params, now int64, states []evicter, steps int) int64 {
	t.Helper()
	for i := range steps {
		now = moveClock(r, p, now)
		n := randCost(r, p)
		switch r.IntN(10) {
		case 0:
			d0, _ := states[0].Peek(now)
			for _, s := range states[1:] {
				if d, _ := s.Peek(now); d != d0 {
					t.Fatalf("history step %d Peek(%d): %+v and %+v", i, now, d0, d)
				}
			}
		case 1:
			for _, s := range states {
				s.Refund(n)
			}
		case 2:
			idle := states[0].RetireIdle(now)
			for _, s := range states[1:] {
				if s.RetireIdle(now) != idle {
					t.Fatalf("history step %d: RetireIdle(%d) differs", i, now)
				}
			}
			if idle {
				for j, s := range states {
					states[j] = successorOf(s, now).(evicter)
				}
			}
		default:
			d0, _ := states[0].AllowN(now, n)
			for _, s := range states[1:] {
				if d, _ := s.AllowN(now, n); d != d0 {
					t.Fatalf("history step %d AllowN(%d, %d): %+v and %+v", i, now, n, d0, d)
				}
			}
		}
	}
	return now
}

// TestEvictSpent drives the three twins and a fourth copy, the original,
// through random histories (grants, refunds, idle retirement, the clock
// moving both ways), then evicts the twins. It requires that they report
// the same instant; that they are retired for good, with a new successor;
// that the states NewSpent and its twins make from that instant answer
// every later request alike; that everything those admit, the original,
// given the same admitted requests, admits too (a key evicted and made
// again never passes more than it would have); and that Evict of a state
// just made so reports the instant back.
func TestEvictSpent(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, rule := range evictRules {
		p := mustParams(t, rule.limit, rule.period, rule.burst)
		var spentLater, admitted int
		for trial := range 300 {
			now := r.Int64N(1 << 40)
			states := make([]evicter, len(spentTwins)+1)
			for i, mk := range spentTwins {
				states[i] = mk.new(p, now)
			}
			states[len(spentTwins)] = NewMutex(p, now) // the original, never evicted
			now = history(t, r, p, now, states, r.IntN(40))
			orig := states[len(spentTwins)]

			spent := states[0].Evict(now)
			for i, s := range states[1:len(spentTwins)] {
				if got := s.Evict(now); got != spent {
					t.Fatalf("%v trial %d: %s evicted at %d reports %d, lockfree %d", rule, trial, spentTwins[i+1].name, now, got, spent)
				}
			}
			if spent > now {
				spentLater++
			}
			for i, s := range states[:len(spentTwins)] {
				if again := s.Evict(now); again != math.MinInt64 {
					t.Fatalf("%s: a second Evict reports %d", spentTwins[i].name, again)
				}
				if _, live := s.AllowN(now, 1); live {
					t.Fatalf("%s: an evicted state granted", spentTwins[i].name)
				}
				fresh, _ := NewMutex(p, now).Peek(now)
				if d, _ := successorOf(s, now).Peek(now); d != fresh {
					t.Fatalf("%s: the successor of an evicted state is not new: %+v", spentTwins[i].name, d)
				}
			}

			// Evict of a state just made reports the instant back (one
			// spent by now is made new at now).
			for _, mk := range spentTwins {
				if got := mk.spent(p, now, spent).Evict(now); got != max(spent, now) {
					t.Fatalf("%v %s: NewSpent(%d, %d).Evict = %d", rule, mk.name, now, spent, got)
				}
			}

			made := make([]evicter, len(spentTwins))
			for i, mk := range spentTwins {
				made[i] = mk.spent(p, now, spent)
			}
			clock := now
			for i := range 40 {
				clock = moveClock(r, p, clock)
				n := randCost(r, p)
				if r.IntN(8) == 0 {
					d0, _ := made[0].Peek(clock)
					for j, s := range made[1:] {
						if d, _ := s.Peek(clock); d != d0 {
							t.Fatalf("%v trial %d replay %d Peek(%d): lockfree %+v, %s %+v", rule, trial, i, clock, d0, spentTwins[j+1].name, d)
						}
					}
					continue
				}
				d0, live := made[0].AllowN(clock, n)
				if !live {
					t.Fatalf("replay %d: a state made by NewSpent retired at %d", i, clock)
				}
				for j, s := range made[1:] {
					if d, _ := s.AllowN(clock, n); d != d0 {
						t.Fatalf("%v trial %d replay %d AllowN(%d, %d): lockfree %+v, %s %+v", rule, trial, i, clock, n, d0, spentTwins[j+1].name, d)
					}
				}
				if d0.Allowed {
					admitted++
					if d, _ := orig.AllowN(clock, n); !d.Allowed {
						t.Fatalf("%v trial %d: evicted at %d (spent %d), the new state admitted (%d, %d), the original would not: %+v",
							rule, trial, now, spent, clock, n, d)
					}
				}
			}
		}
		if spentLater < 50 || admitted < 50 {
			t.Errorf("%v: %d evictions of a spent state, %d replayed grants: not exercised", rule, spentLater, admitted)
		}
	}
}

// TestSpentBeforeNow: with spent at or before now, each constructor makes
// what the plain one makes.
func TestSpentBeforeNow(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	p := mustParams(t, 10, time.Second, 3)
	for range 200 {
		now := r.Int64N(1<<50) - 1<<49
		spent := now - r.Int64N(1<<40)
		if r.IntN(4) == 0 {
			spent = now
		} else if r.IntN(4) == 0 {
			spent = math.MinInt64
		}
		if a, b := NewSpent(p, now, spent), New(p, now); a.origin != b.origin || a.p != b.p || a.tat.Load() != b.tat.Load() {
			t.Fatalf("NewSpent(%d, %d) differs from New", now, spent)
		}
		if a, b := NewMutexSpent(p, now, spent), NewMutex(p, now); a.origin != b.origin || a.p != b.p || a.tat != b.tat {
			t.Fatalf("NewMutexSpent(%d, %d) differs from NewMutex", now, spent)
		}
		if a, b := NewLeakyMutexSpent(p, now, spent), NewLeakyMutex(p, now); a.origin != b.origin || a.p != b.p || a.level != b.level || a.lct != b.lct {
			t.Fatalf("NewLeakyMutexSpent(%d, %d) differs from NewLeakyMutex", now, spent)
		}
	}
}

// TestEvictTable: the instants Evict reports on a few known states.
func TestEvictTable(t *testing.T) {
	p := mustParams(t, 10, time.Second, 3) // a token every 100ms, capacity 3
	ms := int64(time.Millisecond)
	for _, mk := range spentTwins {
		b := mk.new(p, 0)
		if got := b.Evict(0); got != 0 {
			t.Errorf("%s: a bucket full from its origin reports %d", mk.name, got)
		}
		b = mk.new(p, 0)
		b.AllowN(0, 2)
		if got := b.Evict(50 * ms); got != 200*ms {
			t.Errorf("%s: two tokens taken at 0 are back at 200ms, got %d", mk.name, got)
		}
		// A reading from before the origin finds a new bucket owing.
		if got := mk.new(p, 1000).Evict(990); got != 1000 {
			t.Errorf("%s: evicted before its origin: %d, want 1000", mk.name, got)
		}
		// The state made from it: full at 200ms, owing before.
		s := mk.spent(p, 50*ms, 200*ms)
		if d, _ := s.AllowN(150*ms, 1); !d.Allowed || d.Remaining != 1 {
			t.Errorf("%s: at 150ms the spent state holds two tokens: %+v", mk.name, d)
		}
		if d, _ := s.Peek(300 * ms); !d.Allowed || d.Remaining != 2 {
			t.Errorf("%s: %+v", mk.name, d)
		}
	}
	// Scale 3: 333333333⅓ ns per token; a TAT between nanoseconds is
	// reported at the next one, never earlier.
	p3 := mustParams(t, 3, time.Second, 0)
	for _, mk := range spentTwins {
		b := mk.new(p3, 0)
		b.AllowN(0, 1)
		if got := b.Evict(0); got != 333_333_334 {
			t.Errorf("%s: one third of a second rounds up to %d, got %d", mk.name, 333_333_334, got)
		}
	}
}

// bucketEvicter is a bucket as twintest evicts it: owing nothing beyond
// its instant, which carries its debt.
type bucketEvicter struct{ evicter }

func (b bucketEvicter) Evict(now int64) (int64, int64) { return b.evicter.Evict(now), 0 }

// TestEvictConcurrent evicts each twin while 32 goroutines take tokens at
// a frozen clock: the instant Evict reports accounts for exactly the
// grants that landed before it, and the state NewSpent makes from it
// holds exactly the rest, so the key passes its capacity and no more.
func TestEvictConcurrent(t *testing.T) {
	p := mustParams(t, 1000, time.Second, 0) // 1ms a token, capacity 1000
	const now = 5_000_000
	for _, mk := range spentTwins {
		for range 20 {
			g, spent, _ := twintest.EvictDuringTakes(bucketEvicter{mk.new(p, now)}, now)
			if want := now + g*int64(time.Millisecond); spent != want {
				t.Fatalf("%s: %d granted before the eviction, Evict reports %d, want %d", mk.name, g, spent, want)
			}
			made := mk.spent(p, now, spent)
			for {
				if ok, _ := made.Take(now, 1); !ok {
					break
				}
				g++
			}
			if g != p.capacity {
				t.Fatalf("%s: %d granted across the eviction, want %d", mk.name, g, p.capacity)
			}
		}
	}
}

// TestConvertSpent: what a key evicted under one rule is remembered as
// under another after a change at at is the bucket made again converted
// as ConvertTo converts it, holding nothing if it held more (a spent key
// held nothing), owing what it owed; a later instant never converts to
// an earlier one.
func TestConvertSpent(t *testing.T) {
	const T = int64(time.Second)
	r := rand.New(rand.NewPCG(49, 50))
	for range 2000 {
		p := mustParams(t, 1+r.Int64N(20), time.Duration(1+r.Int64N(3))*time.Second, r.Int64N(5))
		q := mustParams(t, 1+r.Int64N(20), time.Duration(1+r.Int64N(3))*time.Second/2, r.Int64N(5))
		at := 100*T + r.Int64N(3*T)
		s1 := at + r.Int64N(8*T) - T/2
		s2 := s1 + r.Int64N(2*T)
		c1 := p.ConvertSpent(s1, at, &q)
		if c2 := p.ConvertSpent(s2, at, &q); s2 > at && c2 < c1 {
			t.Fatalf("%d converts to %d, the later %d to %d", s1, c1, s2, c2)
		}
		if s1 <= at {
			if c1 != s1 {
				t.Fatalf("%d, before the change at %d, converts to %d", s1, at, c1)
			}
			continue
		}
		conv := NewMutexSpent(p, at, s1).ConvertTo(at, q)
		if want := max(conv.Evict(at), q.FullAt(at)); c1 != want { // held nothing: full a burst later
			t.Fatalf("%+v to %+v at %d: %d converts to %d; the bucket made again, converted and emptied, is full at %d", p, q, at, s1, c1, want)
		}
	}
}
