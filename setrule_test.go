package floodgate_test

import (
	"context"
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/internal/testmain"
)

// The tests of Limiter.SetRule: exact decisions across changes of rule,
// checked by hand and against a reference model written apart from the
// algorithms; the lock-free algorithms against their twins across random
// changes (and FuzzSetRuleTwins); what New refuses, SetRule refuses; and
// the interactions with MaxKeys, WaitN and allocation. stress/ races the
// change against 64 goroutines.

// bucketAlgs and windowAlgs are every algorithm SetRule converts, with
// its mutex twin.
var (
	bucketAlgs = []string{floodgate.TokenBucket, testhook.TokenBucketMutex, floodgate.LeakyBucket, testhook.LeakyBucketMutex}
	windowAlgs = []string{floodgate.FixedWindow, testhook.FixedWindowMutex, floodgate.SlidingCounter, testhook.SlidingCounterMutex,
		floodgate.SlidingLog, testhook.SlidingLogMutex}
)

// start is the tests' first instant: not on a window boundary, so that a
// conversion lands inside a window.
const start = int64(1000*time.Second + 250*time.Millisecond)

type step struct {
	advance time.Duration
	key     string
	n       int64           // AllowN(key, n) when rule is nil
	rule    *floodgate.Rule // SetRule(*rule)
	allowed bool
	rem     int64
}

func rule(limit int64, period time.Duration, burst int64) *floodgate.Rule {
	return &floodgate.Rule{Limit: limit, Period: period, Burst: burst}
}

func runSteps(t *testing.T, alg string, first floodgate.Rule, steps []step) {
	t.Helper()
	clock := floodgate.NewManualClock(start)
	l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: first, Clock: clock})
	for i, s := range steps {
		clock.Advance(s.advance)
		if s.rule != nil {
			if err := l.SetRule(*s.rule); err != nil {
				t.Fatalf("step %d: SetRule(%+v): %v", i, *s.rule, err)
			}
			continue
		}
		d := l.AllowN(s.key, s.n)
		if d.Allowed != s.allowed || d.Remaining != s.rem {
			t.Fatalf("step %d: AllowN(%q, %d) = allowed %v, remaining %d; want %v, %d (%+v)", i, s.key, s.n, d.Allowed, d.Remaining, s.allowed, s.rem, d)
		}
	}
}

// TestSetRuleBucketByHand: the token and leaky buckets and their twins,
// with decisions worked out by hand.
func TestSetRuleBucketByHand(t *testing.T) {
	cases := []struct {
		name  string
		first floodgate.Rule
		steps []step
	}{
		{"lower burst", *rule(10, time.Second, 10), []step{
			{key: "a", n: 3, allowed: true, rem: 7},
			{rule: rule(10, time.Second, 5)}, // 7 held → 5
			{key: "a", n: 5, allowed: true, rem: 0},
			{key: "a", n: 1, allowed: false, rem: 0},
			{advance: 99 * time.Millisecond, key: "a", n: 1, allowed: false},
			{advance: time.Millisecond, key: "a", n: 1, allowed: true, rem: 0},
			{key: "b", n: 5, allowed: true, rem: 0}, // new after the change: full at 5
			{key: "b", n: 1, allowed: false},
		}},
		{"raise burst", *rule(10, time.Second, 2), []step{
			{key: "a", n: 1, allowed: true, rem: 1},
			{rule: rule(10, time.Second, 100)}, // 1 held → 1, not 100
			{key: "a", n: 2, allowed: false, rem: 1},
			{key: "a", n: 1, allowed: true, rem: 0},
			{advance: time.Second, key: "a", n: 10, allowed: true, rem: 0}, // refilled at 10/s
			{key: "fresh", n: 100, allowed: true, rem: 0},
		}},
		{"raise limit keeps the fraction", *rule(2, time.Second, 0), []step{
			{key: "a", n: 2, allowed: true, rem: 0},
			{advance: 250 * time.Millisecond, key: "a", n: 1, allowed: false}, // half a token
			{rule: rule(10, time.Second, 0)},                                  // 0.5 of a 100 ms token
			{advance: 49 * time.Millisecond, key: "a", n: 1, allowed: false},
			{advance: time.Millisecond, key: "a", n: 1, allowed: true, rem: 0},
			{advance: time.Second, key: "a", n: 10, allowed: true, rem: 0},
		}},
		{"lower limit by period", *rule(10, time.Second, 0), []step{
			{key: "a", n: 10, allowed: true, rem: 0},
			{advance: 300 * time.Millisecond, rule: rule(10, 10*time.Second, 0)}, // 3 held → 3, then 1/s
			{advance: 999 * time.Millisecond, key: "a", n: 4, allowed: false, rem: 3},
			{advance: time.Millisecond, key: "a", n: 4, allowed: true, rem: 0},
			{advance: 900 * time.Millisecond, key: "a", n: 1, allowed: false}, // the old rule would have 9
		}},
		{"two changes untouched", *rule(10, time.Second, 0), []step{
			{key: "a", n: 8, allowed: true, rem: 2},
			{rule: rule(1, time.Second, 20)},                                   // 2 held → 2, refill 1/s
			{advance: 500 * time.Millisecond, rule: rule(10, time.Second, 50)}, // 2.5 → 2.5, refill 10/s
			{advance: 50 * time.Millisecond, key: "a", n: 3, allowed: true, rem: 0},
		}},
	}
	for _, alg := range bucketAlgs {
		for _, c := range cases {
			t.Run(alg+"/"+c.name, func(t *testing.T) { runSteps(t, alg, c.first, c.steps) })
		}
	}
}

// TestSetRuleWindowByHand: the window algorithms and the log, by hand,
// within the window of the change (where all three hold what the change
// left them) and after it.
func TestSetRuleWindowByHand(t *testing.T) {
	// start lies 250 ms into a one-second window.
	shared := []struct {
		name  string
		first floodgate.Rule
		steps []step
	}{
		{"lower limit", *rule(10, time.Second, 0), []step{
			{key: "a", n: 4, allowed: true, rem: 6},
			{rule: rule(5, time.Second, 0)}, // 6 held, the limit 5 lower → 1
			{key: "a", n: 2, allowed: false, rem: 1},
			{key: "a", n: 1, allowed: true, rem: 0},
			{key: "a", n: 1, allowed: false, rem: 0},
			{key: "b", n: 5, allowed: true, rem: 0},
		}},
		{"raise limit", *rule(10, time.Second, 0), []step{
			{key: "a", n: 8, allowed: true, rem: 2},
			{rule: rule(20, time.Second, 0)}, // 2 held → 2
			{key: "a", n: 3, allowed: false, rem: 2},
			{key: "a", n: 2, allowed: true, rem: 0},
			{key: "b", n: 20, allowed: true, rem: 0},
		}},
	}
	for _, alg := range windowAlgs {
		for _, c := range shared {
			t.Run(alg+"/"+c.name, func(t *testing.T) { runSteps(t, alg, c.first, c.steps) })
		}
	}
	// After the window of the change, each goes its own way.
	spent := []step{
		{key: "a", n: 10, allowed: true, rem: 0},
		{advance: 250 * time.Millisecond, rule: rule(10, 2*time.Second, 0)}, // at 1000.5 s: 0 held → 0; window [1000 s, 1002 s)
	}
	byAlg := map[string][]step{
		floodgate.FixedWindow: {
			{advance: 1499 * time.Millisecond, key: "a", n: 1, allowed: false}, // the old rule's window opened at 1001 s
			{advance: time.Millisecond, key: "a", n: 10, allowed: true, rem: 0},
		},
		floodgate.SlidingCounter: {
			{advance: 1500 * time.Millisecond, key: "a", n: 1, allowed: false}, // at 1002 s the spent window weighs 10
			{advance: time.Second, key: "a", n: 5, allowed: true, rem: 0},      // at 1003 s it weighs 5
		},
		floodgate.SlidingLog: {
			{advance: 1999 * time.Millisecond, key: "a", n: 1, allowed: false}, // the converted entry, at 1000.5 s, leaves at 1002.5 s
			{advance: time.Millisecond, key: "a", n: 10, allowed: true, rem: 0},
		},
	}
	for _, alg := range windowAlgs {
		base := strings.TrimSuffix(alg, "_mutex")
		t.Run(alg+"/longer period", func(t *testing.T) {
			runSteps(t, alg, *rule(10, time.Second, 0), append(append([]step(nil), spent...), byAlg[base]...))
		})
	}
}

// model is a reference for one key under the rule of the moment, with the
// conversion SetRule documents, written from the definitions alone.
type model interface {
	allow(t, n int64) (bool, int64)
	change(t int64, r floodgate.Rule)
}

func newModel(alg string, r floodgate.Rule, t int64) model {
	switch strings.TrimSuffix(alg, "_mutex") {
	case floodgate.TokenBucket, floodgate.LeakyBucket:
		m := &bucketModel{r: r, last: t}
		m.k = new(big.Rat).SetInt64(r.Capacity())
		return m
	case floodgate.FixedWindow:
		return &windowModel{r: r, k: floorDiv(t, int64(r.Period))}
	case floodgate.SlidingCounter:
		return &windowModel{r: r, k: floorDiv(t, int64(r.Period)), sliding: true}
	}
	return &logModel{r: r, newest: t}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// bucketModel holds tokens as an exact rational.
type bucketModel struct {
	r    floodgate.Rule
	k    *big.Rat
	last int64
}

func (m *bucketModel) refill(t int64) {
	add := new(big.Rat).SetFrac64((t-m.last)*m.r.Limit, int64(m.r.Period))
	m.k.Add(m.k, add)
	if c := new(big.Rat).SetInt64(m.r.Capacity()); m.k.Cmp(c) > 0 {
		m.k = c
	}
	m.last = t
}

func (m *bucketModel) floor() int64 {
	q := new(big.Int).Quo(m.k.Num(), m.k.Denom())
	if m.k.Sign() < 0 && !m.k.IsInt() {
		q.Sub(q, big.NewInt(1))
	}
	return max(0, q.Int64())
}

func (m *bucketModel) allow(t, n int64) (bool, int64) {
	m.refill(t)
	if n <= m.r.Capacity() && m.k.Cmp(new(big.Rat).SetInt64(n)) >= 0 {
		m.k.Sub(m.k, new(big.Rat).SetInt64(n))
		return true, m.floor()
	}
	return false, m.floor()
}

// change: min(held, new capacity), rounded down to the new rule's
// nanosecond (the tests' rules have whole-nanosecond intervals).
func (m *bucketModel) change(t int64, r floodgate.Rule) {
	m.refill(t)
	if c := new(big.Rat).SetInt64(r.Capacity()); m.k.Cmp(c) > 0 {
		m.k = c
	}
	interval := int64(r.Period) / r.Limit
	ticks := new(big.Rat).Mul(m.k, new(big.Rat).SetInt64(interval))
	q := new(big.Int).Quo(ticks.Num(), ticks.Denom())
	if ticks.Sign() < 0 && !ticks.IsInt() {
		q.Sub(q, big.NewInt(1))
	}
	m.k = new(big.Rat).SetFrac(q, big.NewInt(interval))
	m.r = r
}

// windowModel is the fixed window or the sliding counter.
type windowModel struct {
	r             floodgate.Rule
	k, prev, curr int64
	sliding       bool
}

func (m *windowModel) at(t int64) (e int64) {
	p := int64(m.r.Period)
	kt := floorDiv(t, p)
	switch {
	case kt == m.k:
	case kt == m.k+1 && m.sliding:
		m.prev, m.curr = m.curr, 0
	default:
		m.prev, m.curr = 0, 0
	}
	m.k = kt
	return t - kt*p
}

func (m *windowModel) remaining(e int64) int64 {
	p := int64(m.r.Period)
	w := int64(0)
	if m.sliding && m.prev > 0 {
		w = (m.prev*(p-e) + p - 1) / p // the tests' counts and periods keep this in int64
	}
	return max(0, m.r.Limit-m.curr-w)
}

func (m *windowModel) allow(t, n int64) (bool, int64) {
	e := m.at(t)
	if n <= m.remaining(e) {
		m.curr += n
		return true, m.remaining(e)
	}
	return false, m.remaining(e)
}

func (m *windowModel) change(t int64, r floodgate.Rule) {
	held := max(0, m.remaining(m.at(t))-max(0, m.r.Limit-r.Limit)) // a lower limit takes its difference
	m.r = r
	m.k, m.prev, m.curr = floorDiv(t, int64(r.Period)), 0, r.Limit-min(held, r.Limit)
}

// logModel is the sliding log.
type logModel struct {
	r      floodgate.Rule
	ts, c  []int64
	newest int64
}

func (m *logModel) window(at int64) int64 {
	s := int64(0)
	for i, ts := range m.ts {
		if at-ts < int64(m.r.Period) {
			s += m.c[i]
		}
	}
	return s
}

func (m *logModel) allow(t, n int64) (bool, int64) {
	at := max(t, m.newest)
	w := m.window(at)
	if n <= m.r.Limit && w+n <= m.r.Limit {
		m.ts, m.c, m.newest = append(m.ts, at), append(m.c, n), at
		return true, m.r.Limit - w - n
	}
	return false, max(0, m.r.Limit-w)
}

func (m *logModel) change(t int64, r floodgate.Rule) {
	at := max(t, m.newest)
	held := m.r.Limit - m.window(at)
	if held > 0 {
		held = max(0, held-max(0, m.r.Limit-r.Limit)) // a lower limit takes its difference
	}
	m.r = r
	m.ts, m.c, m.newest = nil, nil, at
	if cost := r.Limit - min(held, r.Limit); cost > 0 {
		m.ts, m.c = []int64{at}, []int64{cost}
	}
}

// rulesFor are the rules the random tests change between: whole
// nanoseconds per token for the buckets, Burst 0 for the windows.
func rulesFor(alg string) []floodgate.Rule {
	switch strings.TrimSuffix(alg, "_mutex") {
	case floodgate.TokenBucket, floodgate.LeakyBucket:
		return []floodgate.Rule{*rule(10, time.Second, 0), *rule(4, time.Second, 8), *rule(1, 100*time.Millisecond, 3),
			*rule(20, 2*time.Second, 5), *rule(3, 300*time.Millisecond, 0), *rule(1, 7*time.Second, 12)}
	}
	return []floodgate.Rule{*rule(10, time.Second, 0), *rule(4, time.Second, 0), *rule(3, 300*time.Millisecond, 0),
		*rule(20, 2*time.Second, 0), *rule(1, 100*time.Millisecond, 0), *rule(7, 700*time.Millisecond, 10-3)}
}

var advances = []time.Duration{0, 0, time.Millisecond, 37 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second, 3 * time.Second}

// TestSetRuleModel runs random requests and changes of rule on every
// algorithm and twin, on a ManualClock, and requires every decision to be
// the reference model's.
func TestSetRuleModel(t *testing.T) {
	rounds := 40
	if testing.Short() || testmain.Quick() {
		rounds = 8
	}
	for _, alg := range append(append([]string(nil), bucketAlgs...), windowAlgs...) {
		t.Run(alg, func(t *testing.T) {
			rules := rulesFor(alg)
			for seed := range rounds {
				rng := rand.New(rand.NewPCG(uint64(seed), 7))
				r := rules[rng.IntN(len(rules))]
				clock := floodgate.NewManualClock(start)
				l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: r, Clock: clock})
				models := map[string]model{}
				for i := range 300 {
					clock.Advance(advances[rng.IntN(len(advances))])
					now := clock.Now()
					if rng.IntN(10) == 0 {
						r = rules[rng.IntN(len(rules))]
						if err := l.SetRule(r); err != nil {
							t.Fatal(err)
						}
						for _, m := range models {
							m.change(now, r)
						}
						continue
					}
					key := string(rune('a' + rng.IntN(4)))
					n := int64(1 + rng.IntN(4))
					m := models[key]
					if m == nil {
						m = newModel(alg, r, now)
						models[key] = m
					}
					wantOK, wantRem := m.allow(now, n)
					d := l.AllowN(key, n)
					if d.Allowed != wantOK || d.Remaining != wantRem {
						t.Fatalf("seed %d step %d: %s AllowN(%q, %d) under %+v = %v, %d; the model says %v, %d",
							seed, i, alg, key, n, r, d.Allowed, d.Remaining, wantOK, wantRem)
					}
				}
			}
		})
	}
}

// differential runs ops through a pair and requires the same Decisions,
// Peeks and errors from both. Each op byte picks: a change of rule, a
// step of the clock (backwards too: the clock may be read out of order),
// a request, a Peek, a Reset, an eviction.
func differential(t *testing.T, pair [2]string, ops []byte) {
	rules := rulesFor(pair[0])
	r := rules[0]
	var ls [2]*floodgate.Limiter
	var clocks [2]*floodgate.ManualClock
	for j := range ls {
		clocks[j] = floodgate.NewManualClock(start)
		ls[j] = newLimiter(t, floodgate.Config{Algorithm: pair[j], Rule: r, Clock: clocks[j]})
	}
	for i, op := range ops {
		key := string(rune('a' + op%3))
		switch x := op >> 2; {
		case x < 6: // change
			r = rules[int(x)%len(rules)]
			for _, l := range ls {
				if err := l.SetRule(r); err != nil {
					t.Fatal(err)
				}
			}
		case x < 24:
			d := advances[int(x)%len(advances)]
			if x%5 == 0 {
				d = -d / 3
			}
			for _, c := range clocks {
				c.Advance(d)
			}
		case x < 54:
			n := int64(x%4 + 1)
			a, b := ls[0].AllowN(key, n), ls[1].AllowN(key, n)
			if a != b {
				t.Fatalf("op %d: AllowN(%q, %d) under %+v: %s %+v, %s %+v", i, key, n, r, pair[0], a, pair[1], b)
			}
		case x < 60:
			a, b := ls[0].Peek(key), ls[1].Peek(key)
			if a != b {
				t.Fatalf("op %d: Peek(%q) under %+v: %s %+v, %s %+v", i, key, r, pair[0], a, pair[1], b)
			}
		case x < 62:
			for _, l := range ls {
				l.Reset(key)
			}
		default:
			if a, b := ls[0].EvictIdle(), ls[1].EvictIdle(); a != b {
				t.Fatalf("op %d: EvictIdle: %d, %d", i, a, b)
			}
		}
	}
}

// TestSetRuleTwins runs random changes of rule through each lock-free
// algorithm and its twin.
func TestSetRuleTwins(t *testing.T) {
	rounds := 60
	if testing.Short() || testmain.Quick() {
		rounds = 10
	}
	for _, pair := range pairs {
		t.Run(pair[0]+"-"+pair[1], func(t *testing.T) {
			for seed := range rounds {
				rng := rand.New(rand.NewPCG(uint64(seed), 11))
				ops := make([]byte, 400)
				for i := range ops {
					ops[i] = byte(rng.UintN(256))
				}
				differential(t, pair, ops)
			}
		})
	}
}

// FuzzSetRuleTwins is TestSetRuleTwins for the fuzzer: go test -fuzz
// FuzzSetRuleTwins. Its seeds run in every go test.
func FuzzSetRuleTwins(f *testing.F) {
	for i := range pairs {
		f.Add(uint8(i), []byte{200, 201, 0, 4, 8, 100, 120, 140, 28, 29, 200, 201, 202, 240, 250, 5, 200})
		f.Add(uint8(i), []byte{100, 100, 100, 100, 16, 200, 200, 200, 200, 9, 200, 96, 240, 200, 60, 200})
		f.Add(uint8(i), []byte{220, 221, 222, 223, 12, 20, 21, 22, 80, 81, 82, 230, 231, 1, 232, 233})
	}
	f.Fuzz(func(t *testing.T, pair uint8, ops []byte) {
		differential(t, pairs[int(pair)%len(pairs)], ops)
	})
}

// TestSetRuleRefusesWhatNewRefuses: every rule New refuses, SetRule
// refuses with the same error, and the limiter goes on as before.
func TestSetRuleRefusesWhatNewRefuses(t *testing.T) {
	bad := []floodgate.Rule{
		{Period: time.Second},
		{Limit: -3, Period: time.Second},
		{Limit: 10},
		{Limit: 10, Period: -1},
		{Limit: 10, Period: time.Second, Burst: -1},
		{Limit: 1, Period: 1000 * 24 * time.Hour, Burst: 1 << 40},
		{Limit: 2_000_000_000, Period: time.Second},
		{Limit: 10, Period: time.Second, Burst: 5}, // a window's Burst
		{Limit: 1 << 40, Period: time.Hour},        // above the windows' and the log's limit
	}
	for _, alg := range append(append([]string(nil), bucketAlgs...), windowAlgs...) {
		ok := *rule(10, time.Second, 0)
		clock := floodgate.NewManualClock(start)
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: ok, Clock: clock})
		l.AllowN("a", 3)
		before := l.Peek("a")
		for _, r := range bad {
			_, newErr := floodgate.New(testhook.Twins(floodgate.Config{Algorithm: alg, Rule: r}).(floodgate.Config))
			err := l.SetRule(r)
			if (newErr == nil) != (err == nil) || err != nil && err.Error() != newErr.Error() {
				t.Errorf("%s: SetRule(%+v) = %v; New says %v", alg, r, err, newErr)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "floodgate: ") {
				t.Errorf("%s: error %q lacks the prefix", alg, err)
			}
			if newErr == nil {
				if err := l.SetRule(ok); err != nil {
					t.Fatal(err)
				}
			}
		}
		if after := l.Peek("a"); after.Remaining > before.Remaining {
			t.Errorf("%s: refused rules changed the key: %+v, then %+v", alg, before, after)
		}
	}
}

// TestSetRuleCustomAlgorithm: a registered algorithm cannot change its
// rule, and says so.
func TestSetRuleCustomAlgorithm(t *testing.T) {
	if err := testhook.Register("test_setrule_quota", newQuota); err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, floodgate.Config{Algorithm: "test_setrule_quota", Rule: *rule(3, time.Hour, 0), Clock: floodgate.NewManualClock(0)})
	err := l.SetRule(*rule(5, time.Hour, 0))
	if err == nil || !strings.Contains(err.Error(), `algorithm "test_setrule_quota" cannot change its rule`) {
		t.Fatalf("SetRule on a registered algorithm: %v", err)
	}
}

// TestSetRuleMaxKeys: a key evicted at the bound while spent comes back,
// after a change that raised the burst, holding nothing more than it did:
// the sketch's instant was reckoned under the old rule.
func TestSetRuleMaxKeys(t *testing.T) {
	for _, alg := range append(append([]string(nil), bucketAlgs...), windowAlgs...) {
		t.Run(alg, func(t *testing.T) {
			first, next := rule(10, time.Hour, 0), rule(100, time.Hour, 0)
			if strings.HasPrefix(alg, "token") || strings.HasPrefix(alg, "leaky") {
				next = rule(10, time.Hour, 100)
			}
			clock := floodgate.NewManualClock(start)
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: *first, Clock: clock, MaxKeys: 64})
			keys := 400
			for i := range keys {
				// A key whose sketch cells collide with evicted keys' may
				// start spent already: it is spent either way.
				l.AllowN("k"+itoa(i), 10)
			}
			if s := l.Stats(); s.EvictedAtBound == 0 {
				t.Fatalf("nothing was evicted: %+v", s)
			}
			clock.Advance(time.Minute)
			if err := l.SetRule(*next); err != nil {
				t.Fatal(err)
			}
			// Each key held at most 1 token (the buckets refill 10/h: 1/6
			// of a token in a minute; the windows and the log hold 0) and
			// refills at the new rule's rate from there.
			for i := range keys {
				if d := l.AllowN("k"+itoa(i), 2); d.Allowed {
					t.Fatalf("key %d passed 2 after the change: %+v", i, d)
				}
			}
		})
	}
}

func itoa(i int) string {
	return string(rune('A'+i%26)) + string(rune('A'+i/26%26)) + string(rune('A'+i/676))
}

// TestSetRuleWaitCancel: a wait reserved under the old rule and cancelled
// after the change gives nothing back; a wait that stays passes when it
// was promised.
func TestSetRuleWaitCancel(t *testing.T) {
	for _, alg := range bucketAlgs {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(start)
			l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: *rule(1, time.Second, 1), Clock: clock})
			l.Allow("a")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- l.Wait(ctx, "a") }()
			for clock.Waiting() == 0 {
				time.Sleep(time.Millisecond) // for the waiter to block, not for time to pass
			}
			if err := l.SetRule(*rule(10, time.Second, 10)); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait: %v", err)
			}
			// At the change the key owed a token (−1, the reservation): it
			// still does, at 10 a second, so it holds 1 after 200 ms.
			if l.Allow("a") {
				t.Fatal("a cancelled reservation was given back across the change")
			}
			clock.Advance(199 * time.Millisecond)
			if l.Allow("a") {
				t.Fatal("passed before the debt was repaid")
			}
			clock.Advance(time.Millisecond)
			if !l.Allow("a") {
				t.Fatal("did not pass once the debt was repaid")
			}
		})
	}
}

// TestSetRuleAllocatesNothing: after a change, Allow on a key held still
// allocates nothing.
func TestSetRuleAllocatesNothing(t *testing.T) {
	for _, alg := range append(append([]string(nil), bucketAlgs...), windowAlgs...) {
		if strings.HasPrefix(alg, floodgate.SlidingLog) {
			continue // the log's ring grows with its entries
		}
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: *rule(1_000_000, time.Millisecond, 0)})
		l.Allow("a")
		if err := l.SetRule(*rule(900_000, time.Millisecond, 0)); err != nil {
			t.Fatal(err)
		}
		l.Allow("a")
		if allocs := testing.AllocsPerRun(2000, func() { l.Allow("a") }); allocs != 0 {
			t.Errorf("%s: %.2f allocations per Allow after SetRule", alg, allocs)
		}
	}
}
