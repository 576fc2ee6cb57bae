package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/redis/go-redis/v9"
)

// step is one operation of a rule-change script: at (µs after the test's
// start), either SetRule(rule) or AllowN(key, n) with its expected answer
// (and, when retry is not 0, its RetryAfter).
type step struct {
	at      int64
	rule    *floodgate.Rule
	key     string
	n       int64
	allowed bool
	retry   time.Duration
}

func setTo(at int64, r floodgate.Rule) step { return step{at: at, rule: &r} }

func allow(at int64, key string, n int64, allowed bool) step {
	return step{at: at, key: key, n: n, allowed: allowed}
}

// runSteps plays steps on a replica whose clock starts at t0 µs.
func runSteps(t *testing.T, l *Limiter, clock *floodgate.ManualClock, t0 int64, steps []step) {
	t.Helper()
	ctx := context.Background()
	for i, s := range steps {
		clock.Set((t0 + s.at) * 1000)
		if s.rule != nil {
			if err := l.SetRule(*s.rule); err != nil {
				t.Fatalf("step %d: SetRule(%+v): %v", i, *s.rule, err)
			}
			continue
		}
		d, err := l.AllowN(ctx, s.key, s.n)
		if err != nil || d.Allowed != s.allowed || (s.retry != 0 && d.RetryAfter != s.retry) {
			t.Fatalf("step %d (+%dµs): AllowN(%q, %d) = %+v, %v; want Allowed %v (RetryAfter %v)",
				i, s.at, s.key, s.n, d, err, s.allowed, s.retry)
		}
		if d.Limit != l.p.rs().capacity {
			t.Fatalf("step %d: Limit %d, the rule's capacity is %d", i, d.Limit, l.p.rs().capacity)
		}
	}
	if s := l.Stats(); s.Errors != 0 || s.Fallbacks != 0 {
		t.Fatalf("Redis failed: %+v", s)
	}
}

const ms = int64(1000) // µs

// TestSetRuleBuckets: exact decisions across raises and lowerings of a
// bucket's rate and burst, keys converted lazily at their first call
// after the change, across several changes at once, and a rule that
// changes back (A, B, A), which must not read a key written under the
// first A as if the change to B had not happened.
func TestSetRuleBuckets(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	const t0 = epoch / 1000
	tenPerSecond := floodgate.Rule{Limit: 10, Period: time.Second} // 100 ms a token, burst 10
	fast := floodgate.Rule{Limit: 100, Period: time.Second, Burst: 20}
	slow := floodgate.Rule{Limit: 1, Period: time.Hour}
	for _, alg := range []string{floodgate.TokenBucket, floodgate.LeakyBucket} {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(t0 * 1000)
			l := replica(t, c, Config{Algorithm: alg, Rule: tenPerSecond, Prefix: "sr-" + alg}, clock)
			runSteps(t, l, clock, t0, []step{
				allow(0, "a", 10, true),
				allow(0, "a", 1, false),
				allow(0, "b", 10, true),
				// At 250 ms "a" holds 2.5 tokens; the raise keeps 2 and the
				// half token, as 5 ms of the new 10 ms step.
				setTo(250*ms, fast),
				allow(265*ms, "a", 4, true), // 2.5 + 1.5 refilled at the new rate
				{at: 265 * ms, key: "a", n: 1, retry: 10 * time.Millisecond},
				allow(265*ms, "new", 20, true), // a key made after the change is full under it
				allow(265*ms, "new", 1, false),
				// The lowering: "a" holds 10 tokens of the fast rule at 365
				// ms, and keeps 1 of the slow rule's burst of 1.
				setTo(365*ms, slow),
				allow(366*ms, "a", 1, true),
				{at: 366 * ms, key: "a", n: 1, retry: time.Hour}, // it was full at the change: its refill began at 366 ms
				// "b", untouched since 0, converts at both changes: 2.5
				// tokens at 250 ms, 2 and 115 ms of fast refill at 365 ms,
				// 14 tokens: 1 of the slow rule.
				allow(400*ms, "b", 1, true),
				allow(400*ms, "b", 1, false),
			})
			// A, B, A: "c" spent under ten a second, the change to slow
			// leaves it 1 token (of 2.5), the change back 1 of ten a
			// second, not the 10 that reading its state as ten a second's
			// again would give.
			clock2 := floodgate.NewManualClock(t0 * 1000)
			l2 := replica(t, c, Config{Algorithm: alg, Rule: tenPerSecond, Prefix: "aba-" + alg}, clock2)
			runSteps(t, l2, clock2, t0, []step{
				allow(0, "c", 10, true),
				setTo(250*ms, slow),
				setTo(1250*ms, tenPerSecond),
				allow(1250*ms, "c", 2, false),
				allow(1250*ms, "c", 1, true),
				allow(1250*ms, "c", 1, false),
				allow(1350*ms, "c", 1, true), // and from the change it refills at ten a second
			})
		})
	}
}

// TestSetRuleWindows: the same for the windows: what a key holds at the
// change is what a request then could take, moved into the new period's
// window.
func TestSetRuleWindows(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	const t0 = epoch / 1000 // a multiple of 2 s
	t.Run(floodgate.FixedWindow, func(t *testing.T) {
		clock := floodgate.NewManualClock(t0 * 1000)
		l := replica(t, c, Config{Algorithm: floodgate.FixedWindow, Rule: floodgate.Rule{Limit: 10, Period: time.Second}, Prefix: "srw"}, clock)
		runSteps(t, l, clock, t0, []step{
			allow(100*ms, "a", 7, true),
			allow(100*ms, "b", 10, true),
			// The raise at 500 ms: "a" holds 3, in a window of 2 s that
			// began at 0.
			setTo(500*ms, floodgate.Rule{Limit: 20, Period: 2 * time.Second}),
			allow(600*ms, "a", 3, true),
			{at: 600 * ms, key: "a", n: 1, retry: 1400 * time.Millisecond},
			allow(1500*ms, "b", 1, false), // held nothing at the change: nothing until the new window
			allow(1500*ms, "new", 20, true),
			allow(2000*ms, "a", 20, true), // the new window
			// The lowering at 2500 ms: "a" holds nothing; "b", untouched
			// since 100 ms, is converted at both changes: nothing at 500
			// ms, 20 from 2 s, 5 of the new rule at 2500 ms.
			setTo(2500*ms, floodgate.Rule{Limit: 5, Period: time.Second}),
			allow(2600*ms, "a", 1, false),
			allow(2600*ms, "b", 5, true),
			allow(2600*ms, "b", 1, false),
			allow(3000*ms, "a", 5, true),
			allow(3000*ms, "a", 1, false),
		})
	})
	t.Run(floodgate.SlidingCounter, func(t *testing.T) {
		clock := floodgate.NewManualClock(t0 * 1000)
		l := replica(t, c, Config{Algorithm: floodgate.SlidingCounter, Rule: floodgate.Rule{Limit: 10, Period: time.Second}, Prefix: "srs"}, clock)
		runSteps(t, l, clock, t0, []step{
			allow(100*ms, "a", 10, true),
			// At 1500 ms the previous window's 10 weigh 5: "a" holds 5,
			// kept under a limit of 20 in this window, with no previous
			// count: 15 charged.
			setTo(1500*ms, floodgate.Rule{Limit: 20, Period: time.Second}),
			allow(1600*ms, "a", 5, true),
			allow(1600*ms, "a", 1, false),
			// At 2500 ms the 20 of the window before weigh 10.
			allow(2500*ms, "a", 11, false),
			allow(2500*ms, "a", 10, true),
			// Lowered at 2500 ms: "a" holds nothing, in a window of 5 s
			// (which began at 0); the next begins at 5 s with the 5 of
			// this one weighing all but nothing.
			setTo(2500*ms, floodgate.Rule{Limit: 5, Period: 5 * time.Second}),
			allow(4999*ms, "a", 1, false),
			allow(5000*ms, "a", 1, false),
			allow(9000*ms, "a", 4, true), // 5 × 1/5 of a window still weighs 1
			allow(9000*ms, "a", 1, false),
		})
	})
}

// TestSetRuleLog: the log's key holds, after the change, one entry of the
// cost that leaves it what it held, min the new Limit.
func TestSetRuleLog(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	const t0 = epoch / 1000
	clock := floodgate.NewManualClock(t0 * 1000)
	l := replica(t, c, Config{Algorithm: floodgate.SlidingLog, Rule: floodgate.Rule{Limit: 10, Period: time.Second}, Prefix: "srl"}, clock)
	runSteps(t, l, clock, t0, []step{
		allow(0, "a", 4, true),
		allow(400*ms, "a", 4, true),
		allow(400*ms, "b", 10, true),
		// At 600 ms "a" holds 2 of 10; the limit, 5 lower, leaves it
		// nothing: one entry of 5 at 600 ms.
		setTo(600*ms, floodgate.Rule{Limit: 5, Period: time.Second}),
		{at: 601 * ms, key: "a", n: 1, retry: 999 * time.Millisecond}, // until the entry of 5 leaves
		allow(1600*ms, "a", 5, true),
		allow(1600*ms, "a", 1, false),
		// "b" held nothing at 600 ms: its entry of 5 leaves at 1600 ms,
		// not at 1400 ms, when its own would have.
		allow(1500*ms, "b", 1, false),
		allow(1600*ms, "b", 5, true),
		// The raise: "a" holds nothing at 1700 ms (5 in the window), and
		// keeps nothing under a limit of 50 a window of 10 s.
		setTo(1700*ms, floodgate.Rule{Limit: 50, Period: 10 * time.Second}),
		allow(1700*ms, "a", 1, false),
		allow(11699*ms, "a", 1, false),
		allow(11700*ms, "a", 50, true),
		allow(1700*ms, "new", 50, true),
	})
}

// TestSetRuleRefused: SetRule refuses what New refuses, and then nothing
// changes, in Redis or in the FailLocal limiter; a rule of the same step
// and capacity changes nothing.
func TestSetRuleRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	bad := map[string][]floodgate.Rule{
		floodgate.TokenBucket: {{}, {Limit: -1, Period: time.Second}, {Limit: 1, Period: 999}, {Limit: 3, Period: 1001 * time.Nanosecond},
			{Limit: 1, Period: time.Microsecond, Burst: 1 << 51}},
		floodgate.SlidingCounter: {{Limit: 1 << 40, Period: time.Hour}, {Limit: 1, Period: 0}},
		floodgate.SlidingLog:     {{Limit: 1 << 32, Period: time.Second}, {Limit: 1, Period: 1 << 61}},
	}
	for alg, rules := range bad {
		clock := floodgate.NewManualClock(epoch)
		rule := floodgate.Rule{Limit: 2, Period: time.Hour}
		l := replica(t, c, Config{Algorithm: alg, Rule: rule, Prefix: "refused"}, clock)
		before := l.p.rs()
		for _, r := range rules {
			if _, err := New(c, Config{Algorithm: alg, Rule: r}); err == nil {
				t.Fatalf("%s: New accepts %+v", alg, r)
			}
			err := l.SetRule(r)
			if err == nil || !strings.HasPrefix(err.Error(), "redislimit: ") {
				t.Fatalf("%s: SetRule(%+v) = %v, want New's error", alg, r, err)
			}
			if l.p.rs() != before {
				t.Fatalf("%s: a refused rule changed the Limiter", alg)
			}
		}
		for i, want := range []bool{true, true, false} {
			if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed != want || d.Limit != 2 {
				t.Fatalf("%s: request %d after refusals: %+v, %v", alg, i, d, err)
			}
		}
		if alg != floodgate.TokenBucket {
			continue
		}
		// The same rule in other words: no change, no history.
		if err := l.SetRule(floodgate.Rule{Limit: 4, Period: 2 * time.Hour, Burst: 2}); err != nil {
			t.Fatal(err)
		}
		if h := l.p.rs().history; len(h) != 0 {
			t.Fatalf("%s: the same step and capacity made a history %+v", alg, h)
		}
	}
}

// TestSetRuleHistory: a change's rule leaves the calls' arguments once
// every key written under it has expired; more than maxHistory changes
// cut the history short, and a key written before the cut holds nothing
// at it (stricter, never looser).
func TestSetRuleHistory(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	clock := floodgate.NewManualClock(epoch)
	a, b := floodgate.Rule{Limit: 2, Period: time.Hour}, floodgate.Rule{Limit: 3, Period: time.Hour}
	l := replica(t, c, Config{Rule: a, Prefix: "hist"}, clock)
	if d, err := l.Allow(ctx, "old"); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	for i := range maxHistory + 4 {
		clock.Advance(time.Millisecond)
		r := b
		if i%2 == 1 {
			r = a
		}
		if err := l.SetRule(r); err != nil {
			t.Fatal(err)
		}
	}
	h := l.p.rs().history
	if len(h) != maxHistory || h[0].interval != 0 || h[0].end != h[1].end-1000 {
		t.Fatalf("history %+v: want %d changes, cut short at the first", h, maxHistory)
	}
	// "old" held 1 of 2 when the changes began; cut short, it holds nothing.
	if d, err := l.Allow(ctx, "old"); err != nil || d.Allowed {
		t.Fatalf("a key from before the cut: %+v, %v; want a denial", d, err)
	}
	if d, err := l.AllowN(ctx, "fresh", l.p.rs().capacity); err != nil || !d.Allowed {
		t.Fatalf("a new key: %+v, %v", d, err)
	}
	// Past the longest TTL of those rules, the history goes, at a call.
	clock.Set((h[len(h)-1].expires + 1) * 1000)
	if _, err := l.Allow(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if h := l.p.rs().history; len(h) != 0 {
		t.Fatalf("history after every key expired: %+v", h)
	}
}

// TestSetRuleInstant: outside tests the change's instant is Redis's clock
// (TIME); with Redis gone, SetRule still changes the rule, and the
// FailLocal limiter follows it.
func TestSetRuleInstant(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 1, Period: time.Hour}})
	before := time.Now().UnixMicro()
	if err := l.SetRule(floodgate.Rule{Limit: 2, Period: time.Hour}); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMicro()
	if h := l.p.rs().history; len(h) != 1 || h[0].end < before-1000 || h[0].end > after+1000 {
		t.Fatalf("history %+v: want one change between %d and %d", h, before, after)
	}

	down := redis.NewClient(&redis.Options{Addr: closedAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	clock := floodgate.NewManualClock(0)
	l = mustNew(t, down, Config{Rule: floodgate.Rule{Limit: 1, Period: time.Hour}, Clock: clock, BreakAfter: 1000})
	if err := l.SetRule(floodgate.Rule{Limit: 3, Period: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, true, false} {
		if d, err := l.Allow(context.Background(), "k"); err != nil || d.Allowed != want || d.Limit != 3 {
			t.Fatalf("FailLocal, request %d: %+v, %v; want Allowed %v under the new rule", i, d, err, want)
		}
	}
	// Config.Local is a rule of its own: SetRule leaves it.
	local := floodgate.Rule{Limit: 1, Period: time.Hour}
	l = mustNew(t, down, Config{Rule: floodgate.Rule{Limit: 1, Period: time.Hour}, Local: &local, Clock: clock, BreakAfter: 1000})
	if err := l.SetRule(floodgate.Rule{Limit: 3, Period: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if d, err := l.Allow(context.Background(), "k"); err != nil || d.Allowed != want {
			t.Fatalf("Local, request %d: %+v, %v; want Allowed %v", i, d, err, want)
		}
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop()
	return addr
}

// TestSetRuleLease: a change retires every batch the replica holds (their
// units lapse) and its cached denials; after it, decisions follow the new
// rule as if no lease had been taken; a return of units leased before it
// lapses instead of reaching Redis.
func TestSetRuleLease(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(epoch)
			l := replica(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 1000, Period: time.Hour},
				Lease: Lease{Max: 200, TTL: time.Minute}, Prefix: "srlease"}, clock)
			for range 10 {
				if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
					t.Fatal(d, err)
				}
			}
			held := heldUnits(l, "k")
			if held == 0 {
				t.Fatal("no lease taken")
			}
			lapsed := l.Stats().Lapsed
			// Lowered to 5 an hour: the key holds 5 (it held 1000 - 10 -
			// held in Redis, and held here).
			if err := l.SetRule(floodgate.Rule{Limit: 5, Period: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if got := spendable(l, "k"); got != 0 {
				t.Fatalf("%d units still spendable after the change", got)
			}
			l.s.lease.sweep(clock.Now()) // the bookkeeper finds them
			if s := l.Stats(); s.Lapsed-lapsed != held {
				t.Fatalf("lapsed %d after the change, want the %d held", s.Lapsed-lapsed, held)
			}
			n := 0
			for range 20 {
				d, err := l.Allow(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					n++
				}
				if d.Limit != 5 {
					t.Fatalf("Limit %d after the change", d.Limit)
				}
			}
			want := 5 // a bucket holds min(what it held, 5)
			if alg != floodgate.TokenBucket && alg != floodgate.LeakyBucket {
				want = 0 // a window had spent 10 of 1000 (and leased more): the limit, 995 lower, leaves nothing
			}
			if n != want {
				t.Fatalf("%d admitted after lowering to 5, want %d", n, want)
			}
			if s := l.Stats(); s.Errors != 0 || s.Fallbacks != 0 {
				t.Fatalf("Redis failed: %+v", s)
			}
			// A return sent under the old rule finds the key converted and
			// gives it nothing; one of a grant of the old gen lapses here.
			lapsed = l.Stats().Lapsed
			if _, err := l.s.lease.giveBack(ctx, []giveBack{{p: l.p, rkey: l.redisKey("k"), units: 3, k: 0, gen: 0}}); err != nil {
				t.Fatal(err)
			}
			if s := l.Stats(); s.Lapsed-lapsed != 3 {
				t.Fatalf("a stale return: lapsed %d, want 3", s.Lapsed-lapsed)
			}
			if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed {
				t.Fatalf("after a stale return: %+v, %v; want a denial", d, err)
			}
		})
	}
}

// TestSetRuleStress: goroutines decide on a few keys while another
// changes the rule back and forth, and the manual clock moves; no key may
// be admitted more than the rules in force allowed, with the change's
// contract: at each change a key keeps at most min(what it held, the new
// capacity), then refills at the new rate.
func TestSetRuleStress(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	steps := 3000
	if testmain.Quick() {
		steps = 800
	}
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			bucket := alg == floodgate.TokenBucket || alg == floodgate.LeakyBucket
			rules := []floodgate.Rule{{Limit: 40, Period: 100 * time.Millisecond}, {Limit: 10, Period: 50 * time.Millisecond}, {Limit: 100, Period: 400 * time.Millisecond}}
			if bucket {
				rules = []floodgate.Rule{{Limit: 400, Period: time.Second, Burst: 20}, {Limit: 100, Period: time.Second, Burst: 50}, {Limit: 1000, Period: time.Second, Burst: 5}}
			}
			clock := floodgate.NewManualClock(epoch)
			l := replica(t, c, Config{Algorithm: alg, Rule: rules[0], Prefix: fmt.Sprintf("stress%d", time.Now().UnixNano())}, clock)
			const keys = 3
			var admitted [keys]atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			var errs atomic.Value
			var calls atomic.Int64 // decisions made, for the clock to wait on
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !stop.Load(); i++ {
						k := (g + i) % keys
						d, err := l.Allow(context.Background(), fmt.Sprint("k", k))
						calls.Add(1)
						if err != nil {
							errs.Store(err)
							return
						}
						if d.Allowed {
							admitted[k].Add(1)
						}
					}
				}()
			}
			// The changes, on the clock: (instant µs, rule), the first at
			// the start.
			type change struct {
				at   int64
				rule floodgate.Rule
			}
			start := clock.Now() / 1000
			changes := []change{{start, rules[0]}}
			rng := rand.New(rand.NewPCG(uint64(len(alg)), 7))
			for i := range steps {
				clock.Advance(time.Duration(50+rng.IntN(200)) * time.Microsecond)
				if i%40 == 39 {
					r := rules[rng.IntN(len(rules))]
					if err := l.SetRule(r); err != nil {
						t.Fatal(err)
					}
					changes = append(changes, change{clock.Now() / 1000, r})
				}
				// Let the racers decide a few times at this instant (no
				// sleep: progress, counted).
				for want := calls.Load() + 4; calls.Load() < want && errs.Load() == nil; {
					runtime.Gosched()
				}
			}
			stop.Store(true)
			wg.Wait()
			if err := errs.Load(); err != nil {
				t.Fatal(err)
			}
			end := clock.Now() / 1000
			// The bound: a key holds at most the first rule's capacity at
			// the start, keeps at most min(held, capacity) at each change
			// (so no more than it had), and gains at most its rule's
			// allowance for the time the rule is in force: for a bucket, a
			// token a step; for a window, Limit at each of its boundaries;
			// for the log, see its case. A request that
			// races a change counts under either rule: a bucket's bound
			// has one more per change.
			bound := float64(changes[0].rule.Capacity())
			for i, ch := range changes {
				next := end
				if i+1 < len(changes) {
					next = changes[i+1].at
				}
				period := int64(ch.rule.Period / time.Microsecond)
				switch {
				case bucket:
					step := float64(ceilDiv(int64(ch.rule.Period), ch.rule.Limit)) / 1000
					bound += float64(next-ch.at)/step + 1
				case alg == floodgate.SlidingLog:
					// What a log's key admits is what it held at the start
					// and what leaves its window after. The conversion
					// stamps what the key spent at the change, so nothing
					// leaves within a Period of it, and after that at most
					// Limit a Period. A request racing the change may count
					// under either rule: one more.
					if d := next - ch.at; d > period {
						bound += float64(ch.rule.Limit * ceilDiv(d-period, period))
					}
					if i > 0 {
						bound++
					}
				default:
					bound += float64(ch.rule.Limit * (next/period - ch.at/period))
				}
			}
			for k := range keys {
				got := admitted[k].Load()
				t.Logf("key %d: admitted %d, bound %.0f, over %d changes and %d µs", k, got, bound, len(changes)-1, end-start)
				if float64(got) > bound {
					t.Errorf("key %d: admitted %d, beyond the rules' %.0f", k, got, bound)
				}
			}
			if s := l.Stats(); s.Errors != 0 || s.Fallbacks != 0 {
				t.Fatalf("Redis failed: %+v", s)
			}
		})
	}
}

// TestSetRuleRollout: two replicas on one Redis, A changed to a faster
// rule, B not yet. A key that B spends after A's change is B's, under the
// old rule: A converts it from then (at its call), not from its own change
// (which would credit the new rate for time B had already spent), and B
// reads A's keys from A's rule likewise.
func TestSetRuleRollout(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	const t0 = epoch / 1000
	old := floodgate.Rule{Limit: 10, Period: time.Second}              // 100 ms a token, burst 10
	fast := floodgate.Rule{Limit: 100, Period: time.Second, Burst: 20} // 10 ms a token, burst 20
	clock := floodgate.NewManualClock(t0 * 1000)
	a := replica(t, c, Config{Rule: old, Prefix: "rollout"}, clock)
	b := replica(t, c, Config{Rule: old, Prefix: "rollout"}, clock)
	at := func(us int64) { clock.Set((t0 + us) * 1000) }
	check := func(l *Limiter, name string, n int64, want bool) {
		t.Helper()
		if d, err := l.AllowN(ctx, "k", n); err != nil || d.Allowed != want {
			t.Fatalf("%s at %dµs: AllowN(%d) = %+v, %v; want Allowed %v", name, clock.Now()/1000-t0, n, d, err, want)
		}
	}
	if err := a.SetRule(fast); err != nil {
		t.Fatal(err)
	}
	at(1 * ms)
	check(b, "B", 10, true) // B empties the key under the old rule, after A's change
	// At 50 ms the key holds 49 ms of the old step's 100: 4.9 ms of the
	// new 10. From A's change it would have refilled 5 tokens.
	at(50 * ms)
	check(a, "A", 1, false)
	at(55 * ms)
	check(a, "A", 1, false) // 4.9 + 5 ms: not yet a token
	at(56 * ms)
	check(a, "A", 1, true) // 4.9 + 6 ms: a token of the new rule
	check(a, "A", 1, false)
	// B reads the key A wrote under the fast rule: at 100 ms it holds 4
	// tokens and 4.9 ms of that rule, which B keeps as 4 tokens and 49 ms
	// of its own step, refilled at its own rate from there.
	at(100 * ms)
	check(b, "B", 5, false)
	check(b, "B", 4, true)
	at(150 * ms)
	check(b, "B", 1, false)
	at(151 * ms)
	check(b, "B", 1, true)
	check(b, "B", 1, false)
}
