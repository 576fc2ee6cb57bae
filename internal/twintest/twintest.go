// Package twintest is the test machinery that floodgate's lock-free
// states and their mutex twins share across packages (internal/window and
// internal/shardlog): the random operations a differential test applies to a
// pair of twins, and the eviction tests' histories and replays. Only
// tests import it.
package twintest

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/decision"
)

// Decision is the answer of every state.
type Decision = decision.Decision

// Twin is what a lock-free state and its mutex twin both offer.
type Twin interface {
	AllowN(now, n int64) (Decision, bool)
	Take(now, n int64) (bool, bool)
	Peek(now int64) (Decision, bool)
	Refund(now, n int64) bool
	RetireIdle(now int64) bool
	Retire()
}

// Dec is a Decision, written short for tables.
func Dec(allowed bool, limit, remaining int64, retryAfter, resetAfter time.Duration) Decision {
	return Decision{Allowed: allowed, Limit: limit, Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// floorDiv is now / period, rounded down.
func floorDiv(now, period int64) int64 {
	k := now / period
	if now%period < 0 {
		k--
	}
	return k
}

// Evicter is a Twin that can also be evicted at MaxKeys: Evict retires it
// for good and reports the instant from which it would have answered as a
// new state, and what it owed beyond a state spent until then.
type Evicter interface {
	Twin
	Evict(now int64) (spent, owed int64)
}

// Charger is a Twin that takes a charge it cannot refuse, into debt.
type Charger interface {
	ChargeN(now, n int64) (Decision, bool, error)
}

// Family is one algorithm's twins, with what the eviction tests need of
// it: the plain and the spent constructors, the successor, and an
// original, one more copy that is never evicted.
type Family struct {
	Name     string
	Limit    int64
	Period   int64
	New      []func(now int64) Evicter
	Spent    []func(now, spent, owed int64) Evicter
	Succ     func(s Evicter, now int64) Evicter
	Original func(now int64) Evicter
	// Charged maps a request the made state admitted at t to the reading
	// at which the original is asked the same: the log charges a request
	// at its newest entry's time when that is later than t.
	Charged func(t int64, d Decision) int64
	// ClosedAhead reports an original that, at now, holds no count and is
	// closed before a window after now's. See EvictSpent.
	ClosedAhead func(orig Evicter, now int64) bool
	// OwedExact says that a state made again from what Evict reported
	// owes exactly what the original owes at every reading from the
	// eviction's on (the fixed window); else it owes no less, exactly as
	// much at the eviction's reading (the log), or at most one more
	// there (the sliding counter, whose debt it holds as a weighted
	// count). See EvictSpent.
	OwedExact bool
	// OwedSlack is how much more the state made again may owe than the
	// original at the eviction's reading: 0, or 1 for the sliding counter.
	OwedSlack int64
}

// MoveClock moves now by a random step either way: mostly within a
// window, sometimes by a few.
func (f *Family) MoveClock(r *rand.Rand, now int64) int64 {
	T := f.Period
	switch r.IntN(10) {
	case 0:
		return now - r.Int64N(2*T+1)
	case 1:
		return now + r.Int64N(3*T+1)
	case 2, 3:
		return now
	case 4:
		return now - r.Int64N(T/f.Limit+2)
	}
	return now + r.Int64N(T/f.Limit+2)
}

// Cost is a random cost: mostly 1 to 3, sometimes one more or one less
// than the limit.
func (f *Family) Cost(r *rand.Rand) int64 {
	if r.IntN(30) == 0 {
		return f.Limit + 1 - 2*r.Int64N(2) // limit+1, or limit−1
	}
	return 1 + r.Int64N(min(f.Limit, 3))
}

// History applies the same random operations to every state and requires
// the same answers: grants, refunds of the grant just made, peeks, idle
// retirement (the states are then replaced by their successors), charges
// into debt (for Chargers), the clock moving both ways. It returns the
// clock at the end.
func (f *Family) History(t *testing.T, r *rand.Rand, now int64, states []Evicter, steps int) int64 {
	t.Helper()
	for i := range steps {
		now = f.MoveClock(r, now)
		n := f.Cost(r)
		switch r.IntN(12) {
		case 10:
			c, ok := states[0].(Charger)
			if !ok {
				continue
			}
			m := 1 + r.Int64N(3*f.Limit) // up to three times the limit
			d0, _, err0 := c.ChargeN(now, m)
			for _, s := range states[1:] {
				if d, _, err := s.(Charger).ChargeN(now, m); d != d0 || (err == nil) != (err0 == nil) {
					t.Fatalf("%s history step %d ChargeN(%d, %d): %+v %v and %+v %v", f.Name, i, now, m, d0, err0, d, err)
				}
			}
		case 0:
			d0, _ := states[0].Peek(now)
			for _, s := range states[1:] {
				if d, _ := s.Peek(now); d != d0 {
					t.Fatalf("%s history step %d Peek(%d): %+v and %+v", f.Name, i, now, d0, d)
				}
			}
		case 1:
			idle := states[0].RetireIdle(now)
			for _, s := range states[1:] {
				if s.RetireIdle(now) != idle {
					t.Fatalf("%s history step %d: RetireIdle(%d) differs", f.Name, i, now)
				}
			}
			if idle {
				for j, s := range states {
					states[j] = f.Succ(s, now)
				}
			}
		default:
			d0, _ := states[0].AllowN(now, n)
			for _, s := range states[1:] {
				if d, _ := s.AllowN(now, n); d != d0 {
					t.Fatalf("%s history step %d AllowN(%d, %d): %+v and %+v", f.Name, i, now, n, d0, d)
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

// EvictSpent drives the twins of each family and a third copy, the
// original, through random histories, then evicts the twins. It requires
// that they report the same instant; that they are retired for good,
// with a new successor; that the states the spent constructors make from
// that instant answer every later request (the clock moving both ways)
// alike; that everything those admit, the original, given the same
// admitted requests, admits too (a key evicted and made again never
// passes more than it would have); and that Evict of a state just made
// so reports the instant back.
func EvictSpent(t *testing.T, r *rand.Rand, fs []Family) {
	t.Helper()
	for _, f := range fs {
		var spentLater, admitted, closedAdmits, owing int
		for trial := range 300 {
			now := r.Int64N(1<<40) - 1<<39
			states := make([]Evicter, len(f.New)+1)
			for i, mk := range f.New {
				states[i] = mk(now)
			}
			states[len(f.New)] = f.Original(now)
			now = f.History(t, r, now, states, r.IntN(40))
			orig := states[len(f.New)]
			twins := states[:len(f.New)]
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
			closed := f.ClosedAhead(orig, now)

			d0, _ := orig.Peek(now)
			spent, owed := twins[0].Evict(now)
			for i, s := range twins[1:] {
				if got, o := s.Evict(now); got != spent || o != owed {
					t.Fatalf("%s %d per %d trial %d: twin %d evicted at %d reports %d owing %d, twin 0 %d owing %d", f.Name, f.Limit, f.Period, trial, i+1, now, got, o, spent, owed)
				}
			}
			if spent > now {
				spentLater++
			}
			if d0.Owed > 0 {
				owing++
			}
			fresh, _ := f.New[0](now).Peek(now)
			for i, s := range twins {
				if again, o := s.Evict(now); again != math.MinInt64 || o != 0 {
					t.Fatalf("%s twin %d: a second Evict reports %d", f.Name, i, again)
				}
				if _, live := s.AllowN(now, 1); live {
					t.Fatalf("%s twin %d: an evicted state granted", f.Name, i)
				}
				if d, _ := f.Succ(s, now).Peek(now); d != fresh {
					t.Fatalf("%s twin %d: the successor of an evicted state is not new: %+v, want %+v", f.Name, i, d, fresh)
				}
			}

			for i, mk := range f.Spent {
				if got, _ := mk(now, spent, owed).Evict(now); spent > now && got != spent {
					t.Fatalf("%s %d per %d twin %d: made at %d from %d, Evict reports %d", f.Name, f.Limit, f.Period, i, now, spent, got)
				}
			}

			made := make([]Evicter, len(f.Spent))
			for i, mk := range f.Spent {
				made[i] = mk(now, spent, owed)
			}
			// What the state made again owes at the eviction's reading is
			// what the original owes there (one more, at most, for the
			// sliding counter's weighted count).
			if dm, _ := made[0].Peek(now); dm.Owed < d0.Owed || dm.Owed > d0.Owed+f.OwedSlack || (d0.Owed > 0) != (owed > 0) {
				t.Fatalf("%s %d per %d trial %d: evicted at %d owing %d (reported %d), the state made again owes %d: %+v",
					f.Name, f.Limit, f.Period, trial, now, d0.Owed, owed, dm.Owed, dm)
			}
			clock := now
			for i := range 40 {
				clock = f.MoveClock(r, clock)
				n := f.Cost(r)
				if r.IntN(8) == 0 {
					d0, _ := made[0].Peek(clock)
					for j, s := range made[1:] {
						if d, _ := s.Peek(clock); d != d0 {
							t.Fatalf("%s trial %d replay %d Peek(%d): twin 0 %+v, twin %d %+v", f.Name, trial, i, clock, d0, j+1, d)
						}
					}
					// From the eviction's reading on, the state made again
					// owes no less than the original (the grants replayed
					// on the original fit its limit: they add no debt).
					if do, _ := orig.Peek(clock); clock >= now && (d0.Owed < do.Owed || f.OwedExact && d0.Owed != do.Owed) {
						t.Fatalf("%s trial %d replay %d Peek(%d): evicted at %d, the state made again owes %d, the original %d", f.Name, trial, i, clock, now, d0.Owed, do.Owed)
					}
					continue
				}
				d0, live := made[0].AllowN(clock, n)
				if !live {
					t.Fatalf("%s replay %d: a state made spent retired at %d", f.Name, i, clock)
				}
				for j, s := range made[1:] {
					if d, _ := s.AllowN(clock, n); d != d0 {
						t.Fatalf("%s %d per %d trial %d replay %d AllowN(%d, %d): twin 0 %+v, twin %d %+v", f.Name, f.Limit, f.Period, trial, i, clock, n, d0, j+1, d)
					}
				}
				if k := floorDiv(clock, f.Period); d0.Allowed && closed && k < spent/f.Period {
					if k < spent/f.Period-1 {
						t.Fatalf("%s trial %d: evicted at %d (spent %d), admitted at %d", f.Name, trial, now, spent, clock)
					}
					closedAdmits++
					continue
				}
				if d0.Allowed {
					admitted++
					at := f.Charged(clock, d0)
					if d, _ := orig.AllowN(at, n); !d.Allowed {
						t.Fatalf("%s %d per %d trial %d: evicted at %d (spent %d), the new state admitted (%d, %d), the original would not at %d: %+v",
							f.Name, f.Limit, f.Period, trial, now, spent, clock, n, at, d)
					}
				}
			}
		}
		if spentLater < 50 || admitted < 50 {
			t.Errorf("%s %d per %d: %d evictions of a spent state, %d replayed grants: not exercised", f.Name, f.Limit, f.Period, spentLater, admitted)
		}
		if _, charges := f.New[0](0).(Charger); charges && owing < 20 {
			t.Errorf("%s %d per %d: %d evictions of a state that owed: not exercised", f.Name, f.Limit, f.Period, owing)
		}
		if closedAdmits > 0 {
			t.Logf("%s %d per %d: %d grants late in the window before a closed one, not replayed", f.Name, f.Limit, f.Period, closedAdmits)
		}
	}
}

// EvictConcurrent evicts each twin of each family, at now, while 32
// goroutines take at that frozen instant: what landed before the eviction
// is within the limit, the instant reported is want[f.Name] (where the
// window it landed in stops weighing), and the state made from it refuses
// at once.
func EvictConcurrent(t *testing.T, fs []Family, now int64, want map[string]int64) {
	t.Helper()
	for _, f := range fs {
		for i, mk := range f.New {
			for range 10 {
				granted, spent, owed := EvictDuringTakes(mk(now), now)
				if granted > f.Limit || spent != want[f.Name] || owed != 0 {
					t.Fatalf("%s twin %d: %d granted, Evict reports %d owing %d, want %d", f.Name, i, granted, spent, owed, want[f.Name])
				}
				if ok, _ := f.Spent[i](now, spent, owed).Take(now, 1); ok {
					t.Fatalf("%s twin %d: the state made from %d admits at %d", f.Name, i, spent, now)
				}
			}
		}
	}
}

// EvictDuringTakes evicts s, at now, while 32 goroutines take one unit
// at a time from it at that frozen instant, once they have been granted
// 300 between them. It returns the units granted, all before the
// eviction (the goroutines stop when s answers retired), and what Evict
// reported.
func EvictDuringTakes(s interface {
	Take(now, n int64) (bool, bool)
	Evict(now int64) (int64, int64)
}, now int64) (granted, spent, owed int64) {
	var count atomic.Int64
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
					count.Add(1)
				}
			}
		}()
	}
	for count.Load() < 300 {
		runtime.Gosched()
	}
	spent, owed = s.Evict(now)
	wg.Wait()
	return count.Load(), spent, owed
}

// Pick chooses a rule from the input's first two bytes.
func Pick(data []byte, limits []int64, periods []time.Duration) (int64, time.Duration) {
	return limits[int(data[0])%len(limits)], periods[int(data[1])%len(periods)]
}

// Run applies one operation per byte of ops to a lock-free state a and
// its twin m, and fails at the first answer on which they differ. A retired
// pair is replaced by its successors, as the registry would; an evicted
// pair, by the states spent makes from what Evict reported of each. Twins
// that are Chargers are charged too, into debt.
func Run(t *testing.T, ops []byte, now, limit int64, period time.Duration, a, m Twin,
	successors func(a, m Twin, now int64) (Twin, Twin), spent func(now, sa, oa, sm, om int64) (Twin, Twin)) {
	t.Helper()
	step := max(1, int64(period)/limit)
	for i, b := range ops {
		op, arg := b%10, int64(b/10)
		n := arg % (limit + 2) // 0 and limit+1 are invalid costs
		switch op {
		case 0, 1:
			da, la := a.AllowN(now, n)
			dm, lm := m.AllowN(now, n)
			if da != dm || la != lm {
				t.Fatalf("op %d AllowN(%d, %d): lock-free %+v %v, mutex %+v %v", i, now, n, da, la, dm, lm)
			}
			if da.Remaining < 0 || da.Remaining > limit || da.RetryAfter < 0 || da.ResetAfter < 0 {
				t.Fatalf("op %d: decision out of range: %+v", i, da)
			}
		case 2:
			ta, la := a.Take(now, n)
			dm, lm := m.AllowN(now, n)
			if ta != dm.Allowed || la != lm {
				t.Fatalf("op %d: Take = %v %v, AllowN = %+v %v", i, ta, la, dm, lm)
			}
		case 3:
			now += arg * step / 2
		case 4:
			now -= arg * step / 3
		case 5:
			da, la := a.Peek(now)
			dm, lm := m.Peek(now)
			if da != dm || la != lm {
				t.Fatalf("op %d Peek: lock-free %+v %v, mutex %+v %v", i, da, la, dm, lm)
			}
		case 6:
			if a.Refund(now, n) != m.Refund(now, n) {
				t.Fatalf("op %d Refund differs", i)
			}
		case 7:
			if a.RetireIdle(now) != m.RetireIdle(now) {
				t.Fatalf("op %d RetireIdle differs", i)
			}
		case 8:
			now += arg * int64(period) << (arg % 40) // far jumps: rebases
		case 9:
			switch arg % 5 {
			case 0:
				a.Retire()
				m.Retire()
			case 1:
				sa, oa := a.(Evicter).Evict(now)
				sm, om := m.(Evicter).Evict(now)
				if sa != sm || oa != om {
					t.Fatalf("op %d Evict(%d): lock-free %d owing %d, mutex %d owing %d", i, now, sa, oa, sm, om)
				}
				a, m = spent(now, sa, oa, sm, om)
			case 2, 3:
				ca, ok := a.(Charger)
				if !ok {
					break
				}
				c := 1 + arg*limit/8 // up to three limits and more
				da, la, ea := ca.ChargeN(now, c)
				dm, lm, em := m.(Charger).ChargeN(now, c)
				if da != dm || la != lm || (ea == nil) != (em == nil) {
					t.Fatalf("op %d ChargeN(%d, %d): lock-free %+v %v %v, mutex %+v %v %v", i, now, c, da, la, ea, dm, lm, em)
				}
			}
		}
		_, la := a.Peek(now)
		_, lm := m.Peek(now)
		if la != lm {
			t.Fatalf("op %d: one twin retired, the other not", i)
		}
		if !la {
			a, m = successors(a, m, now)
		}
	}
}
