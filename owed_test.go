package floodgate_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// The tests of what a Decision says a key owes (Decision.Owed) once the
// Limiter has forgotten the key's state: evicted at MaxKeys, remembered
// in the sketch, and made again, perhaps under a rule SetRule changed
// since. Each runs a key into debt on two Limiters on one clock, one that
// keeps the key (the reference) and one that evicts it, and asks both.
//
// What the evicted key is told must be the truth: the token and leaky
// buckets and the fixed window answer exactly as the reference does, at
// every reading; the sliding counter and the log owe exactly what the
// reference owes at the eviction's reading (the counter at most one more,
// its debt kept as a weighted count) and never less after, refuse
// whenever the reference refuses, and their RetryAfter is the wait after
// which they admit. The twins answer alike.

// owedScenario runs a key, "d", into debt on every Limiter of ls at
// once, on clock.
type owedScenario struct {
	name string
	run  func(clock *floodgate.ManualClock, ls []*floodgate.Limiter)
	// windowEnded: the fixed window owes nothing at the eviction (the
	// charge's window has ended), as its key made again must say.
	windowEnded bool
}

var owedScenarios = []owedScenario{
	{"a charge past the bound", func(_ *floodgate.ManualClock, ls []*floodgate.Limiter) {
		charge(ls, 30)
	}, false},
	{"requests, then a charge", func(clock *floodgate.ManualClock, ls []*floodgate.Limiter) {
		clock.Advance(300 * time.Millisecond)
		for _, l := range ls {
			l.AllowN("d", 4)
		}
		clock.Advance(100 * time.Millisecond)
		charge(ls, 15)
	}, false},
	{"two charges apart", func(clock *floodgate.ManualClock, ls []*floodgate.Limiter) {
		charge(ls, 12)
		clock.Advance(600 * time.Millisecond)
		charge(ls, 20)
	}, false},
	{"a settlement's overrun", func(clock *floodgate.ManualClock, ls []*floodgate.Limiter) {
		rs := make([]floodgate.Reservation, len(ls))
		for i, l := range ls {
			rs[i] = l.Reserve("d", 5)
		}
		clock.Advance(200 * time.Millisecond)
		for i := range ls {
			if _, err := rs[i].Settle(25); err != nil {
				panic(err)
			}
		}
	}, false},
	{"evicted a window after the charge", func(clock *floodgate.ManualClock, ls []*floodgate.Limiter) {
		clock.Advance(900 * time.Millisecond)
		charge(ls, 40)
		clock.Advance(300 * time.Millisecond)
	}, true},
}

func charge(ls []*floodgate.Limiter, n int64) {
	for _, l := range ls {
		if _, err := l.Charge("d", n); err != nil {
			panic(err)
		}
	}
}

// exactOwed are the algorithms whose key, made again, answers exactly as
// the one kept.
var exactOwed = map[string]bool{
	floodgate.TokenBucket: true, testhook.TokenBucketMutex: true, floodgate.LeakyBucket: true, testhook.LeakyBucketMutex: true,
	floodgate.FixedWindow: true, testhook.FixedWindowMutex: true,
}

// owedSlack is how much more than the reference the key made again may
// owe at the eviction's reading.
func owedSlack(alg string) int64 {
	if alg == floodgate.SlidingCounter || alg == testhook.SlidingCounterMutex {
		return 1
	}
	return 0
}

// evictDebtor runs sc on a reference Limiter of alg and on one with
// MaxKeys 1, evicts "d" from the latter by asking for another key, and
// returns both, with the clock at the eviction's reading. The evicted
// key's cells in the sketch collide with no other evicted key's: "d" is
// the only key evicted before it is made again.
func evictDebtor(t *testing.T, alg string, rule floodgate.Rule, sc owedScenario) (ref, ev *floodgate.Limiter, clock *floodgate.ManualClock) {
	t.Helper()
	clock = floodgate.NewManualClock(int64(time.Hour))
	ref = newLimiter(t, floodgate.Config{Algorithm: alg, Rule: rule, Clock: clock})
	ev = newLimiter(t, floodgate.Config{Algorithm: alg, Rule: rule, Clock: clock, MaxKeys: 1})
	sc.run(clock, []*floodgate.Limiter{ref, ev})
	fixed := alg == floodgate.FixedWindow || alg == testhook.FixedWindowMutex
	if d := ref.Peek("d"); (d.Owed == 0) != (sc.windowEnded && fixed) {
		t.Fatalf("%s %s: the key owes %d: %+v", alg, sc.name, d.Owed, d)
	}
	ev.Allow("x") // takes the one place
	if st := ev.Stats(); st.EvictedAtBound != 1 || ev.Len() != 1 {
		t.Fatalf("%s: the debtor was not evicted: %+v", sc.name, st)
	}
	return ref, ev, clock
}

// checkOwed asks ref and ev for "d" at the clock's reading (by Peek, which
// makes nothing), and requires the truth of ev's answer (see above); at
// is true at the eviction's (or the change's) reading. It returns ev's
// answer.
func checkOwed(t *testing.T, alg, what string, clock *floodgate.ManualClock, ref, ev *floodgate.Limiter, at bool) floodgate.Decision {
	t.Helper()
	dr, de := ref.Peek("d"), ev.Peek("d")
	switch {
	case exactOwed[alg]:
		if de != dr {
			t.Fatalf("%s: the key made again answers %+v, the key kept %+v", what, de, dr)
		}
	case de.Allowed && !dr.Allowed, de.Owed < dr.Owed, at && de.Owed > dr.Owed+owedSlack(alg):
		t.Fatalf("%s: the key made again answers %+v, the key kept %+v", what, de, dr)
	}
	if de.Owed > 0 && de.Allowed {
		t.Fatalf("%s: a key that owes is admitted: %+v", what, de)
	}
	if !de.Allowed {
		// RetryAfter is the wait after which the key made again admits,
		// and not a nanosecond sooner.
		now := clock.Now()
		clock.Set(now + int64(de.RetryAfter) - 1)
		early := ev.Peek("d")
		clock.Set(now + int64(de.RetryAfter))
		then := ev.Peek("d")
		clock.Set(now)
		if early.Allowed || !then.Allowed {
			t.Fatalf("%s: %+v, and after RetryAfter less 1 ns %+v, after it %+v", what, de, early, then)
		}
	}
	return de
}

// followOwed checks "d" on ref and ev (checkOwed) every 50 ms for steps
// readings, the first the eviction's if atFirst, and returns ev's
// answers; by the end the key kept must owe nothing.
func followOwed(t *testing.T, alg, name string, clock *floodgate.ManualClock, ref, ev *floodgate.Limiter, steps int, atFirst bool) []floodgate.Decision {
	t.Helper()
	seen := make([]floodgate.Decision, steps)
	for i := range seen {
		seen[i] = checkOwed(t, alg, name+" +"+strconv.Itoa(i)+"×50ms", clock, ref, ev, atFirst && i == 0)
		clock.Advance(50 * time.Millisecond)
	}
	if d := ref.Peek("d"); !d.Allowed || d.Owed != 0 {
		t.Fatalf("%s +%d×50ms: the key kept still owes: %+v", name, steps, d)
	}
	return seen
}

// sameTwins requires each pair of twins (see pairs) to have answered
// alike, reading by reading.
func sameTwins(t *testing.T, name string, answers map[string][]floodgate.Decision) {
	t.Helper()
	for _, pair := range pairs {
		a, b := answers[pair[0]], answers[pair[1]]
		if len(a) != len(b) {
			t.Fatalf("%s %v: %d answers and %d", name, pair, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s %v +%d×50ms: the twins answer %+v and %+v", name, pair, i, a[i], b[i])
			}
		}
	}
}

// TestOwedAfterMaxKeys: a key evicted at MaxKeys while it owes is told
// the truth of what it owes when it comes back, on every algorithm and
// twin, at every reading until long after the debt is paid, and again
// when it is made (its next request) and charged once more.
func TestOwedAfterMaxKeys(t *testing.T) {
	for _, sc := range owedScenarios {
		answers := map[string][]floodgate.Decision{}
		for _, alg := range every {
			ref, ev, clock := evictDebtor(t, alg, chargeRule, sc)
			// Three periods: the debt's every step, and after.
			answers[alg] = followOwed(t, alg, alg+" "+sc.name, clock, ref, ev, 60, true)
		}
		sameTwins(t, sc.name, answers)
	}
	// Made again by its next request, and charged: it owes what it owed,
	// and the charge besides.
	for _, alg := range every {
		ref, ev, _ := evictDebtor(t, alg, chargeRule, owedScenarios[0])
		dr, _ := ref.Charge("d", 2)
		de, err := ev.Charge("d", 2)
		if err != nil || de.Owed < dr.Owed || exactOwed[alg] && de != dr || de.Owed > dr.Owed+owedSlack(alg) {
			t.Fatalf("%s: a charge of the key made again: %+v, %v; the key kept %+v", alg, de, err, dr)
		}
		if ev.Len() != 1 {
			t.Fatalf("%s: Len %d after the key was made again", alg, ev.Len())
		}
	}
}

// TestOwedAfterSetRule: a key evicted at MaxKeys while it owes, then
// converted by SetRule to a rule of another rate, limit or period, is
// told the truth of what it owes as a key kept and converted is (the
// buckets: a slower rule never lets it repay faster than the key kept,
// as it did when the sketch kept an instant of the old rule).
func TestOwedAfterSetRule(t *testing.T) {
	rules := []floodgate.Rule{
		{Limit: 5, Period: time.Second},      // slower: the debt lasts longer
		{Limit: 20, Period: time.Second},     // faster
		{Limit: 10, Period: 3 * time.Second}, // a longer period
		{Limit: 2, Period: 100 * time.Millisecond},
	}
	for _, sc := range owedScenarios {
		for _, next := range rules {
			answers := map[string][]floodgate.Decision{}
			for _, alg := range every {
				if sc.windowEnded && (alg == floodgate.FixedWindow || alg == testhook.FixedWindowMutex) {
					continue // it owes nothing: a key evicted fresh comes back new, as a key never seen
				}
				ref, ev, clock := evictDebtor(t, alg, chargeRule, sc)
				clock.Advance(70 * time.Millisecond)
				for _, l := range []*floodgate.Limiter{ref, ev} {
					if err := l.SetRule(next); err != nil {
						t.Fatal(err)
					}
				}
				// Twelve seconds: the slowest debt's end, and after.
				name := alg + " " + sc.name + " to " + strconv.FormatInt(next.Limit, 10) + "/" + next.Period.String()
				answers[alg] = followOwed(t, alg, name, clock, ref, ev, 240, false)
			}
			sameTwins(t, sc.name+" to "+next.Period.String(), answers)
		}
	}
}

// TestOwedNotIdle: a key that owes is never evicted as idle, by EvictIdle
// or the sweeper's instant (IdleTTL before now): it answers as no new key
// does. Once its debt is paid and it is full, it goes.
func TestOwedNotIdle(t *testing.T) {
	for _, alg := range every {
		clock := floodgate.NewManualClock(int64(time.Hour))
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: chargeRule, Clock: clock})
		if _, err := l.Charge("d", 30); err != nil {
			t.Fatal(err)
		}
		for range 9 { // every algorithm owes for the whole window, at least
			clock.Advance(100 * time.Millisecond)
			owed := l.Peek("d").Owed
			if n := l.EvictIdle(); n != 0 || owed == 0 {
				t.Fatalf("%s: EvictIdle evicted %d keys of one that owes %d", alg, n, owed)
			}
			if d := l.Peek("d"); d.Owed != owed {
				t.Fatalf("%s: owes %d after EvictIdle, %d before", alg, d.Owed, owed)
			}
		}
		clock.Advance(3 * time.Second) // every algorithm has paid 20 by then
		if n := l.EvictIdle(); n != 1 || l.Len() != 0 {
			t.Fatalf("%s: EvictIdle evicted %d keys once the debt was paid; Len %d", alg, n, l.Len())
		}
	}
}
