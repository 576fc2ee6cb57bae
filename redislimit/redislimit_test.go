package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/redis/go-redis/v9"
)

// client returns a client of srv as redislimit wants one: it holds each call
// to its context's deadline.
func client(t testing.TB, srv *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustNew(t testing.TB, c redis.UniversalClient, cfg Config) *Limiter {
	t.Helper()
	if cfg.Timeout == 0 {
		// A loaded machine's slow answer is no failure here: a test of
		// timeouts sets its own.
		cfg.Timeout = 10 * time.Second
	}
	l, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

var redisAlgorithms = []string{floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow, floodgate.SlidingCounter, floodgate.SlidingLog}

// decideAt is l's call c for key with Redis's clock, as the scripts see
// it, at now µs: l's redisClock, set to now.
func decideAt(ctx context.Context, l *Limiter, key string, c call, now int64) (reply, error) {
	rc, ok := l.s.redisClock.(*floodgate.ManualClock)
	if !ok {
		rc = floodgate.NewManualClock(0)
		l.s.redisClock = rc
	}
	rc.Set(now * 1000)
	return l.p.decide(ctx, l.p.redisKey(key), key, c)
}

// effective is the in-process rule that decides as the script does, with
// one nanosecond of floodgate's clock standing for one microsecond of
// Redis's: the step the Limiter holds in whole microseconds becomes the
// same number of nanoseconds.
func effective(t testing.TB, l *Limiter, alg string, r floodgate.Rule) floodgate.Rule {
	return effectiveOf(t, l.p, alg, r)
}

// effectiveOf is effective for a policy.
func effectiveOf(t testing.TB, p *policy, alg string, r floodgate.Rule) floodgate.Rule {
	t.Helper()
	switch alg {
	case floodgate.TokenBucket, floodgate.LeakyBucket:
		return floodgate.Rule{Limit: 1, Period: time.Duration(p.rs().interval), Burst: r.Capacity()}
	case floodgate.FixedWindow, floodgate.SlidingCounter, floodgate.SlidingLog:
		return floodgate.Rule{Limit: r.Limit, Period: time.Duration(p.rs().interval)}
	}
	t.Fatalf("effective: no rule for %q", alg)
	return floodgate.Rule{}
}

// randomRule draws a rule that the Limiter holds exactly or rounds.
func randomRule(rng *rand.Rand, alg string) floodgate.Rule {
	limit := int64(1 + rng.IntN(20))
	if rng.IntN(4) == 0 {
		limit = int64(1 + rng.IntN(2000))
	}
	periods := []time.Duration{13 * time.Microsecond, 100 * time.Microsecond, time.Millisecond, 7 * time.Millisecond, 10 * time.Millisecond, time.Second / 3, time.Second, 90 * time.Second}
	period := periods[rng.IntN(len(periods))]
	bucket := alg == floodgate.TokenBucket || alg == floodgate.LeakyBucket
	if bucket && int64(period) < limit*int64(time.Microsecond) {
		period = time.Duration(limit) * time.Millisecond
	}
	r := floodgate.Rule{Limit: limit, Period: period}
	if bucket && rng.IntN(2) == 0 {
		r.Burst = int64(1 + rng.IntN(30))
	}
	return r
}

// TestScriptMatchesInProcess is the differential test: for every algorithm,
// random rules and random sequences of requests and peeks on a few keys,
// at instants of a manual clock, the script (sent that clock's now as its
// now argument) and the in-process limiter must give identical
// Decisions. The quick form tries 20 rules per algorithm instead of 60.
func TestScriptMatchesInProcess(t *testing.T) {
	trials := 60
	if testmain.Quick() {
		trials = 20
	}
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(len(alg)), 42))
			ops := 0
			for trial := 0; trial < trials; trial++ {
				rule := randomRule(rng, alg)
				// A budget for Redis that a loaded machine cannot run out: the
				// test compares answers, and a fallback would fail it.
				cfg := Config{Algorithm: alg, Rule: rule, Prefix: fmt.Sprintf("diff%d", trial), Timeout: 10 * time.Second}
				l, err := New(c, cfg)
				for err != nil { // a step Redis cannot hold: draw again
					rule = randomRule(rng, alg)
					cfg.Rule = rule
					l, err = New(c, cfg)
				}
				l.s.margin = int64(time.Hour / time.Millisecond) // the test's clock is not Redis's
				l.p.box(l.p.rs())
				clock := floodgate.NewManualClock(0)
				ref, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: effective(t, l, alg, rule), Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				start := int64(1_700_000_000_000_000) + rng.Int64N(1_000_000_000)
				now := start
				step := max(1, l.p.rs().interval/int64(1+rng.IntN(4)))
				for i := 0; i < 120; i++ {
					switch r := rng.IntN(10); {
					case r < 6:
						now += rng.Int64N(step + 1)
					case r < 8:
						now += rng.Int64N(3*l.p.rs().interval + 1)
					case r < 9:
						now = max(start, now-rng.Int64N(l.p.rs().interval+1)) // Redis's clock may step back
					}
					clock.Set(now)
					key := fmt.Sprintf("client-%d", rng.IntN(3))
					var got, want floodgate.Decision
					if op := rng.IntN(6); op == 0 {
						var r reply
						r, err = decideAt(ctx, l, key, call{n: 1, dry: true}, now)
						got = r.d
						want = ref.Peek(key)
					} else if op == 1 {
						// A charge that cannot be refused, to three times the
						// capacity: within both bounds.
						n := 1 + rng.Int64N(3*rule.Capacity())
						var r reply
						r, err = decideAt(ctx, l, key, call{n: n, force: true}, now)
						got = r.d
						var cerr error
						want, cerr = ref.Charge(key, n)
						if cerr != nil || r.bound {
							t.Fatalf("a charge of %d: in process %v, the script past its bound %v", n, cerr, r.bound)
						}
					} else {
						n := 1 + rng.Int64N(rule.Capacity())
						if rng.IntN(2) == 0 {
							n = 1
						}
						var r reply
						r, err = decideAt(ctx, l, key, call{n: n}, now)
						got = r.d
						want = ref.AllowN(key, n)
					}
					if err != nil {
						t.Fatal(err)
					}
					if s := l.Stats(); s.Fallbacks != 0 {
						t.Fatalf("the script failed: %+v (rule %+v, op %d at %d, %s)", s, rule, i, now, key)
					}
					want.RetryAfter = scale(want.RetryAfter)
					want.ResetAfter = scale(want.ResetAfter)
					if got != want {
						t.Fatalf("%s %+v (effective %+v), op %d at %d µs on %s: script %+v, in-process %+v",
							alg, rule, effective(t, l, alg, rule), i, now, key, got, want)
					}
					ops++
				}
			}
			t.Logf("%d decisions identical", ops)
		})
	}
}

// scale turns a wait that the in-process limiter counted in nanoseconds
// standing for microseconds into real microseconds.
func scale(d time.Duration) time.Duration {
	if d == floodgate.Never {
		return d
	}
	return d * time.Microsecond
}

// TestScriptValidatesItsArguments calls the scripts directly with what a
// buggy or hostile caller might send: each is an error reply, and nothing
// is written.
func TestScriptValidatesItsArguments(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	// n dry want give gk now kind interval capacity margin param, now
	// TIME (-1).
	good := map[*script][]any{
		gcraScript:   {1, 0, 0, 0, 0, -1, 0, 1000, 10, 1000, 0},
		windowScript: {1, 0, 0, 0, 0, -1, 2, 1000, 10, 1000, 0},
		logScript:    {1, 0, 0, 0, 0, -1, 3, 1000, 10, 1000, 1000},
	}
	// mayBeZero are the arguments that 0 is good for: dry, want, give,
	// gk, now and margin; the buckets' kind; and the param of the kinds
	// that have none. mayBeNegative: the buckets' and the windows' gk (a
	// log's stamp may not be), and now (-1 is TIME).
	mayBeZero := map[*script]map[int]bool{
		gcraScript:   {1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 9: true, 10: true},
		windowScript: {1: true, 2: true, 3: true, 4: true, 5: true, 9: true, 10: true},
		logScript:    {1: true, 2: true, 3: true, 4: true, 5: true, 9: true},
	}
	mayBeNegative := map[*script]map[int]bool{gcraScript: {4: true, 5: true}, windowScript: {4: true, 5: true}, logScript: {5: true}}
	bad := []any{"nan", "NaN", "inf", "-inf", "1.5", "0", "-1", "", "x", "1e300", "9007199254740993"}
	for s, args := range good {
		if _, err := c.Eval(ctx, s.src, []string{"ok" + s.sha}, args...).Result(); err != nil {
			t.Fatalf("good arguments %v: %v", args, err)
		}
		for i := range args {
			for _, b := range bad {
				if b == "0" && mayBeZero[s][i] || b == "-1" && mayBeNegative[s][i] {
					continue
				}
				a := append([]any(nil), args...)
				a[i] = b
				_, err := c.Eval(ctx, s.src, []string{"bad"}, a...).Result()
				if err == nil || !strings.Contains(err.Error(), "floodgate:") {
					t.Errorf("argument %d = %q: got %v, want a floodgate error", i+1, b, err)
				}
			}
			_, err := c.Eval(ctx, s.src, []string{"bad"}, args[:i]...).Result()
			if err == nil {
				t.Errorf("with only %d arguments: no error", i)
			}
		}
	}
	if n, err := c.Exists(ctx, "bad").Result(); err != nil || n != 0 {
		t.Fatalf("a rejected call wrote its key: %d, %v", n, err)
	}
	// A key that holds something else is an error, not a reading.
	if err := c.Set(ctx, "garbage", "hello", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for s, args := range good {
		if _, err := c.Eval(ctx, s.src, []string{"garbage"}, args...).Result(); err == nil {
			t.Errorf("a key holding %q was read as state", "hello")
		}
	}
}

// TestDenialWritesNothing counts Redis's own changes to its data set
// (rdb_changes_since_last_save): a grant is one change (the log's first
// is one, SET; each later one three: its entry, the header, the TTL), a
// denial and a peek none.
func TestDenialWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	changes := func() int64 {
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "rdb_changes_since_last_save:"); ok {
				var n int64
				fmt.Sscan(v, &n)
				return n
			}
		}
		t.Fatal("no rdb_changes_since_last_save in INFO")
		return 0
	}
	for _, alg := range redisAlgorithms {
		l := mustNew(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 2, Period: time.Hour}})
		before := changes()
		for i := 0; i < 2; i++ {
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("%s: grant %d: %+v, %v", alg, i, d, err)
			}
		}
		want := int64(2)
		if alg == floodgate.SlidingLog {
			want = 1 + 3
		}
		if got := changes() - before; got != want {
			t.Fatalf("%s: two grants made %d changes; want %d", alg, got, want)
		}
		before = changes()
		for i := 0; i < 5; i++ {
			if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed {
				t.Fatalf("%s: denial %d: %+v, %v", alg, i, d, err)
			}
			if _, err := l.Peek(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		if got := changes() - before; got != 0 {
			t.Fatalf("%s: denials and peeks made %d changes", alg, got)
		}
	}
}

// TestTTL checks that a key lives until it would be fresh again, and a
// second more.
func TestTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	cases := []struct {
		alg   string
		rule  floodgate.Rule
		fresh time.Duration // after one grant, at most
	}{
		{floodgate.TokenBucket, floodgate.Rule{Limit: 1, Period: 10 * time.Second, Burst: 3}, 10 * time.Second},
		{floodgate.LeakyBucket, floodgate.Rule{Limit: 2, Period: 10 * time.Second}, 5 * time.Second},
		{floodgate.FixedWindow, floodgate.Rule{Limit: 5, Period: 10 * time.Second}, 10 * time.Second},
		{floodgate.SlidingCounter, floodgate.Rule{Limit: 5, Period: 10 * time.Second}, 20 * time.Second},
		{floodgate.SlidingLog, floodgate.Rule{Limit: 5, Period: 10 * time.Second}, 10 * time.Second},
	}
	for _, tc := range cases {
		l := mustNew(t, c, Config{Algorithm: tc.alg, Rule: tc.rule})
		if _, err := l.Allow(ctx, "ttl"); err != nil {
			t.Fatal(err)
		}
		ttl, err := c.PTTL(ctx, l.redisKey("ttl")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > tc.fresh+time.Second {
			t.Errorf("%s: TTL %v after one grant; want in (0, %v]", tc.alg, ttl, tc.fresh+time.Second)
		}
	}
}

func TestKey(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 1, Period: time.Second}, Prefix: "api"})
	k := l.redisKey("{slot}")
	if !strings.HasPrefix(k, "api:token_bucket:") || len(k) != len("api:token_bucket:")+32 || strings.ContainsAny(k[len("api:"):], "{}") {
		t.Fatalf("Key = %q", k)
	}
	if long := l.redisKey(strings.Repeat("x", 1<<20)); len(long) != len(k) {
		t.Fatalf("a 1 MiB id made a key of %d bytes", len(long))
	}
	if l.redisKey("a") == l.redisKey("b") {
		t.Fatal("two ids share a key")
	}
}

// TestPeekAndReset: Peek answers as Allow would and consumes nothing;
// Reset makes the key full again, in Redis and in the FailLocal limiter.
func TestPeekAndReset(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		l := mustNew(t, client(t, srv), Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 3, Period: time.Hour}})
		for i := 0; i < 3; i++ {
			p, err := l.Peek(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if p.Allowed != d.Allowed || p.Remaining != d.Remaining || p.Remaining != int64(2-i) {
				t.Fatalf("%s: Peek %+v, then Allow %+v", alg, p, d)
			}
		}
		if p, _ := l.Peek(ctx, "k"); p.Allowed || p.RetryAfter <= 0 {
			t.Fatalf("%s: Peek of an empty key = %+v", alg, p)
		}
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("%s: Allow after Reset = %+v, %v", alg, d, err)
		}
	}
}
