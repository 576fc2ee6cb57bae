package floodgate_test

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/keystate"
	refimpl "github.com/floodgate-go/floodgate/internal/reference"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// newLimiter builds cfg's Limiter, whose Algorithm may name a mutex twin
// (internal/hook's names).
func newLimiter(t testing.TB, cfg floodgate.Config) *floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(testhook.Twins(cfg).(floodgate.Config))
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// both runs a test against the lock-free token bucket and its mutex twin.
func both(t *testing.T, f func(t *testing.T, algorithm string)) {
	for _, a := range []string{floodgate.TokenBucket, testhook.TokenBucketMutex} {
		t.Run(a, func(t *testing.T) { f(t, a) })
	}
}

func TestNewRejects(t *testing.T) {
	ok := floodgate.Rule{Limit: 10, Period: time.Second}
	cases := []struct {
		name string
		cfg  floodgate.Config
		want string
	}{
		{"zero limit", floodgate.Config{Rule: floodgate.Rule{Period: time.Second}}, "Limit must be at least 1"},
		{"negative limit", floodgate.Config{Rule: floodgate.Rule{Limit: -3, Period: time.Second}}, "Limit must be at least 1"},
		{"zero period", floodgate.Config{Rule: floodgate.Rule{Limit: 10}}, "Period must be positive"},
		{"negative period", floodgate.Config{Rule: floodgate.Rule{Limit: 10, Period: -1}}, "Period must be positive"},
		{"negative burst", floodgate.Config{Rule: floodgate.Rule{Limit: 10, Period: time.Second, Burst: -1}}, "Burst must be 0"},
		{"overflowing rule", floodgate.Config{Rule: floodgate.Rule{Limit: 1, Period: 1000 * 24 * time.Hour, Burst: 1 << 40}}, "too long to represent"},
		{"rate above 1/ns", floodgate.Config{Rule: floodgate.Rule{Limit: 2_000_000_000, Period: time.Second}}, "above one token per nanosecond"},
		{"unknown algorithm", floodgate.Config{Algorithm: "leaky_bukket", Rule: ok}, `unknown algorithm "leaky_bukket"`},
		{"a mutex twin", floodgate.Config{Algorithm: testhook.TokenBucketMutex, Rule: ok}, `"token_bucket_mutex" is the mutex twin of "token_bucket"`},
		{"invalid global", floodgate.Config{Rule: ok, Global: &floodgate.Rule{Limit: 0, Period: time.Second}}, "Global: Rule.Limit"},
		{"overflowing global", floodgate.Config{Rule: ok, Global: &floodgate.Rule{Limit: 1, Period: time.Duration(math.MaxInt64), Burst: 4}}, "Global rule"},
		{"negative ttl", floodgate.Config{Rule: ok, IdleTTL: -time.Second}, "IdleTTL"},
	}
	for _, c := range cases {
		l, err := floodgate.New(c.cfg)
		if err == nil || l != nil {
			t.Errorf("%s: New returned %v, %v; want an error", c.name, l, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not say %q", c.name, err, c.want)
		}
	}
}

// TestRegister: the tests' hook registers an algorithm of their own, and
// refuses a taken or empty name and a factory it cannot call; the
// algorithm then limits as its states say.
func TestRegister(t *testing.T) {
	if err := testhook.Register(floodgate.TokenBucket, func(floodgate.Rule) (keystate.Algorithm, error) { return nil, nil }); err == nil {
		t.Error("registering a taken name must fail")
	}
	if err := testhook.Register("", func(floodgate.Rule) (keystate.Algorithm, error) { return nil, nil }); err == nil {
		t.Error("registering an empty name must fail")
	}
	if err := testhook.Register("nil_factory", nil); err == nil {
		t.Error("registering a nil factory must fail")
	}
	if err := testhook.Register("nil_typed_factory", (func(floodgate.Rule) (keystate.Algorithm, error))(nil)); err == nil {
		t.Error("registering a nil factory of the right type must fail")
	}
	if err := testhook.Register("mistyped_factory", func(floodgate.Rule) (any, error) { return nil, nil }); err == nil {
		t.Error("registering a factory of another type must fail")
	}
	if err := testhook.Register("test_quota", newQuota); err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, floodgate.Config{Algorithm: "test_quota", Rule: floodgate.Rule{Limit: 3, Period: time.Hour}, Clock: floodgate.NewManualClock(0)})
	for i := range 5 {
		if got, want := l.Allow("k"), i < 3; got != want {
			t.Fatalf("custom algorithm, request %d: Allow = %v, want %v", i, got, want)
		}
	}
	if l.Len() != 1 {
		t.Fatalf("Len = %d, want 1", l.Len())
	}
	l.Reset("k")
	if !l.Allow("k") {
		t.Fatal("after Reset the custom algorithm's key starts fresh")
	}
}

// quota is a custom algorithm for TestRegister: Limit requests per key,
// never refilled, behind a mutex.
type quota struct{ limit int64 }

func newQuota(r floodgate.Rule) (keystate.Algorithm, error) { return quota{r.Limit}, nil }

func (q quota) NewState(int64) keystate.State { return &quotaState{limit: q.limit} }

type quotaState struct {
	mu          sync.Mutex
	limit, used int64
	retired     bool
}

func (s *quotaState) AllowN(_, n int64) (decision.Decision, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retired {
		return decision.Decision{}, false
	}
	d := decision.Decision{Limit: s.limit, RetryAfter: floodgate.Never}
	if n >= 1 && s.used+n <= s.limit {
		s.used += n
		d.Allowed, d.RetryAfter = true, 0
	}
	d.Remaining = s.limit - s.used
	return d, true
}

func (s *quotaState) Take(now, n int64) (bool, bool) {
	d, live := s.AllowN(now, n)
	return d.Allowed, live
}

func (s *quotaState) Peek(now int64) (decision.Decision, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return decision.Decision{Allowed: s.used < s.limit, Limit: s.limit, Remaining: s.limit - s.used}, !s.retired
}

func (s *quotaState) Refund(_, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.retired {
		s.used -= n
	}
	return true
}

func (s *quotaState) RetireIdle(int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used == 0 && !s.retired {
		s.retired = true
		return true
	}
	return false
}

func (s *quotaState) Retire() {
	s.mu.Lock()
	s.retired = true
	s.mu.Unlock()
}

func (s *quotaState) Successor(int64) keystate.State { return &quotaState{limit: s.limit} }

func TestAllowSequence(t *testing.T) {
	both(t, func(t *testing.T, alg string) {
		clock := floodgate.NewManualClock(1 << 40)
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 5, Period: time.Second, Burst: 2}, Clock: clock})
		want := []bool{true, true, false, false}
		for i, w := range want {
			if got := l.Allow("a"); got != w {
				t.Fatalf("request %d: %v, want %v", i, got, w)
			}
		}
		if !l.Allow("b") {
			t.Fatal("keys are independent")
		}
		clock.Advance(199 * time.Millisecond)
		if d := l.AllowN("a", 1); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("one ms early: %+v", d)
		}
		clock.Advance(time.Millisecond)
		if d := l.AllowN("a", 1); !d.Allowed || d.Remaining != 0 || d.ResetAfter != 400*time.Millisecond {
			t.Fatalf("on time: %+v", d)
		}
		if d := l.AllowN("a", 3); d.Allowed || d.RetryAfter != floodgate.Never || d.Limit != 2 {
			t.Fatalf("cost above capacity: %+v", d)
		}
		if d := l.AllowN("a", 0); d.Allowed || d.RetryAfter != floodgate.Never {
			t.Fatalf("cost 0: %+v", d)
		}
	})
}

func TestPeekAndReset(t *testing.T) {
	both(t, func(t *testing.T, alg string) {
		clock := floodgate.NewManualClock(0)
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 3, Period: time.Second}, Clock: clock})
		fresh := l.Peek("x")
		if !fresh.Allowed || fresh.Remaining != 2 || fresh.Limit != 3 || l.Len() != 0 {
			t.Fatalf("Peek of an unknown key: %+v, Len %d", fresh, l.Len())
		}
		l.AllowN("x", 2)
		p := l.Peek("x")
		if p != l.Peek("x") || p.Remaining != 0 || !p.Allowed {
			t.Fatalf("Peek consumed or answered wrong: %+v", p)
		}
		if d := l.AllowN("x", 1); d != p {
			t.Fatalf("Peek said %+v, AllowN(1) said %+v", p, d)
		}
		l.Reset("x")
		if got := l.Peek("x"); got != fresh {
			t.Fatalf("after Reset: %+v, want fresh %+v", got, fresh)
		}
		l.Reset("never-seen") // no panic, no key
		if l.Len() != 0 {
			t.Fatalf("Len after reset = %d", l.Len())
		}
	})
}

func TestGlobalCapRefunds(t *testing.T) {
	both(t, func(t *testing.T, alg string) {
		clock := floodgate.NewManualClock(0)
		l := newLimiter(t, floodgate.Config{
			Algorithm: alg,
			Rule:      floodgate.Rule{Limit: 4, Period: time.Second},
			Global:    &floodgate.Rule{Limit: 6, Period: time.Second},
			Clock:     clock,
		})
		for i := range 4 {
			if !l.Allow("a") {
				t.Fatalf("a's request %d denied", i)
			}
		}
		if d := l.AllowN("b", 1); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("b's first request: %+v (Remaining is the global's 1)", d)
		}
		l.Allow("b")
		before := l.Peek("b")
		d := l.AllowN("b", 1)
		if d.Allowed || d.Limit != 6 || d.RetryAfter != time.Second/6+1 { // ceil(1s/6)
			t.Fatalf("global cap refusal: %+v", d)
		}
		if after := l.Peek("b"); after != before {
			t.Fatalf("b was punished twice: Peek %+v before, %+v after", before, after)
		}
		if d := l.AllowN("b", 7); d.Allowed || d.RetryAfter != floodgate.Never {
			t.Fatalf("cost above both capacities: %+v", d)
		}
		clock.Advance(time.Second / 6) // 166666666ns: a third of a ns short
		if l.Allow("c") {
			t.Fatal("a global token before 1/6 s")
		}
		clock.Advance(1)
		if !l.Allow("c") || l.Allow("c") {
			t.Fatal("exactly one global token once 1/6 s has passed")
		}
	})
}

func TestEvictIdle(t *testing.T) {
	both(t, func(t *testing.T, alg string) {
		clock := floodgate.NewManualClock(0)
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 10, Period: time.Second}, Clock: clock})
		for i := range 100 {
			l.AllowN("k"+strconv.Itoa(i), 1+int64(i%10))
		}
		if n := l.EvictIdle(); n != 0 || l.Len() != 100 {
			t.Fatalf("nothing is idle yet: evicted %d, Len %d", n, l.Len())
		}
		clock.Advance(500 * time.Millisecond) // keys that took ≤ 5 are full again
		if n := l.EvictIdle(); n != 50 || l.Len() != 50 {
			t.Fatalf("evicted %d (Len %d), want 50", n, l.Len())
		}
		if d := l.AllowN("k9", 10); d.Allowed {
			t.Fatalf("k9 took 10 and is not full after 0.5s: %+v", d)
		}
		clock.Advance(time.Second)
		if n := l.EvictIdle(); n != 50 || l.Len() != 0 {
			t.Fatalf("evicted %d (Len %d), want the other 50", n, l.Len())
		}
	})
}

// TestClockExtremes: a clock that jumps a century forward finds a full
// bucket; one that jumps back finds fewer tokens, never more, and no panic.
func TestClockExtremes(t *testing.T) {
	both(t, func(t *testing.T, alg string) {
		clock := floodgate.NewManualClock(0)
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 3, Period: time.Second}, Clock: clock})
		l.AllowN("k", 3)
		clock.Set(math.MaxInt64 - 5)
		if d := l.AllowN("k", 3); !d.Allowed {
			t.Fatalf("at the end of time the bucket is full: %+v", d)
		}
		if d := l.AllowN("k", 1); d.Allowed {
			t.Fatalf("and then empty: %+v", d)
		}
		clock.Set(math.MinInt64)
		if d := l.AllowN("k", 1); d.Allowed || d.RetryAfter != floodgate.Never {
			t.Fatalf("a clock far before the key's origin: %+v", d)
		}
		clock.Set(0)
		l.Reset("k")
		if d := l.AllowN("k", 1); alg == floodgate.TokenBucket && (d.Allowed || d.RetryAfter != floodgate.Never) {
			// An inline word is relative to its table's origin, which the
			// jump to the end of time moved there: a new key at 0 lies
			// 2^63 ns before it, too early to hold. (Out of line, each
			// state has an origin of its own.)
			t.Fatalf("a new key far before the table's origin: %+v", d)
		}

		clock = floodgate.NewManualClock(0)
		l = newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 3, Period: time.Second}, Clock: clock})
		l.AllowN("k", 3)
		clock.Advance(-time.Hour)
		if d := l.AllowN("k", 1); d.Allowed || d.RetryAfter != time.Hour+time.Second/3+1 { // ceil
			t.Fatalf("an hour back: %+v", d)
		}
	})
}

func TestAllowAllocatesNothing(t *testing.T) {
	type testCase struct {
		cfg   floodgate.Config
		clock *floodgate.ManualClock // advanced 1ms per round, when set
	}
	cases := []testCase{
		{cfg: floodgate.Config{Rule: floodgate.Rule{Limit: 1000, Period: time.Second}, Global: &floodgate.Rule{Limit: 10, Period: time.Second}}},
		{cfg: floodgate.Config{Rule: floodgate.Rule{Limit: 1000, Period: time.Second}, Clock: floodgate.NewManualClock(0)}},
	}
	for _, alg := range every {
		c := testCase{cfg: floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 1000, Period: time.Second}}}
		if strings.HasPrefix(alg, floodgate.SlidingLog) {
			// A log holds an entry per admission in its window, and
			// allocates when a key's entries outgrow its ring. In steady
			// state, with entries leaving as fast as they come, it must
			// allocate nothing.
			c.clock = floodgate.NewManualClock(0)
			c.cfg.Rule = floodgate.Rule{Limit: 50, Period: 10 * time.Millisecond}
			c.cfg.Clock = c.clock
		}
		cases = append(cases, c)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	for _, c := range cases {
		l := newLimiter(t, c.cfg)
		i := 0
		round := func() {
			l.Allow(keys[i%len(keys)])
			l.AllowN(keys[(i+7)%len(keys)], 2)
			if c.clock != nil && i%len(keys) == 0 {
				c.clock.Advance(time.Millisecond)
			}
			i++
		}
		for range 50 * len(keys) { // create every key and reach steady state
			round()
		}
		if allocs := testing.AllocsPerRun(2000, round); allocs != 0 {
			t.Errorf("%+v: %.2f allocations per Allow on existing keys", c.cfg, allocs)
		}
	}
}

// TestEveryAlgorithmContract runs the contract that every registered
// algorithm keeps through the facade: a denial consumes nothing, Peek is
// AllowN(1) without the taking, a global refusal is refunded, Reset starts
// fresh, EvictIdle removes what a fresh key would answer like, and a cost
// of 0 or above the limit is a Never denial.
func TestEveryAlgorithmContract(t *testing.T) {
	for _, alg := range every {
		for _, reg := range registries {
			t.Run(alg+"/"+reg.name, func(t *testing.T) {
				clock := floodgate.NewManualClock(10 * int64(time.Second))
				l, err := reg.make(floodgate.Config{
					Algorithm: alg,
					Rule:      floodgate.Rule{Limit: 5, Period: time.Second},
					Global:    &floodgate.Rule{Limit: 7, Period: time.Hour},
					Clock:     clock,
				})
				if err != nil {
					t.Fatal(err)
				}
				contract(t, l, clock)
			})
		}
	}
}

// registries are the Limiter, on its flat table, and the reference
// limiter, on the reference registry: the contract holds on both.
var registries = []struct {
	name string
	make func(floodgate.Config) (limiter, error)
}{
	{"flat", func(c floodgate.Config) (limiter, error) { return floodgate.New(testhook.Twins(c).(floodgate.Config)) }},
	{"xsync", func(c floodgate.Config) (limiter, error) { return refimpl.New(c) }},
}

// contract is what every algorithm keeps through the facade, on l (rule
// 5 per second, global cap 7 per hour) driven by clock.
func contract(t *testing.T, l limiter, clock *floodgate.ManualClock) {
	t.Helper()
	fresh := l.Peek("k")
	if d := l.AllowN("k", 1); d != fresh {
		t.Fatalf("Peek of a new key said %+v, AllowN(1) said %+v", fresh, d)
	}
	l.AllowN("k", 4)
	before := l.Peek("k")
	if d := l.AllowN("k", 1); d.Allowed || d.Limit != 5 {
		t.Fatalf("the sixth request in a period passed: %+v", d)
	}
	if after := l.Peek("k"); after != before {
		t.Fatalf("a denial consumed: Peek %+v before, %+v after", before, after)
	}
	for _, n := range []int64{0, -1, 6} {
		if d := l.AllowN("other", n); d.Allowed || d.RetryAfter != floodgate.Never {
			t.Fatalf("cost %d: %+v", n, d)
		}
	}
	l.AllowN("g", 2) // the global cap of 7 is now spent
	before = l.Peek("g")
	if d := l.AllowN("g", 1); d.Allowed || d.Limit != 7 {
		t.Fatalf("the global cap let an eighth request through: %+v", d)
	}
	if after := l.Peek("g"); after != before {
		t.Fatalf("a global refusal was not refunded: Peek %+v before, %+v after", before, after)
	}
	l.Reset("k")
	if got := l.Peek("k"); got != fresh {
		t.Fatalf("after Reset: %+v, want %+v", got, fresh)
	}
	clock.Advance(3 * time.Second)
	if n := l.EvictIdle(); n != 2 || l.Len() != 0 { // "other" and "g"; "k" was reset
		t.Fatalf("evicted %d, Len %d; want every key gone after 3 periods", n, l.Len())
	}
}

func TestFixedWindowBoundaryBurst(t *testing.T) {
	for alg, want := range map[string]int{floodgate.FixedWindow: 20, floodgate.SlidingCounter: 10} {
		clock := floodgate.NewManualClock(int64(time.Second) - 1) // the last ns of window 0
		l := newLimiter(t, floodgate.Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 10, Period: time.Second}, Clock: clock})
		passed := 0
		for range 10 {
			if l.Allow("k") {
				passed++
			}
		}
		clock.Advance(1) // the first ns of window 1
		for range 10 {
			if l.Allow("k") {
				passed++
			}
		}
		if passed != want {
			t.Errorf("%s: %d passed across the boundary in 2ns, want %d", alg, passed, want)
		}
	}
}
