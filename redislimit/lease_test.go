package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/redis/go-redis/v9"
)

// epoch is where the tests' manual clocks start: a date in 2023, as
// Redis's own clock would read it, in nanoseconds.
const epoch = int64(1_700_000_000) * int64(time.Second)

// replica returns a lease-mode Limiter on clock, whose now (in µs) the
// scripts take for Redis's clock, as one replica of a service: clock is
// both its Config.Clock and Redis's.
func replica(t testing.TB, c redis.UniversalClient, cfg Config, clock *floodgate.ManualClock) *Limiter {
	t.Helper()
	return replicaOn(t, c, cfg, clock, clock)
}

// replicaOn is replica with clock as Config.Clock and redisClock as
// Redis's clock, which the scripts and the leases read.
func replicaOn(t testing.TB, c redis.UniversalClient, cfg Config, clock, redisClock *floodgate.ManualClock) *Limiter {
	t.Helper()
	return replicaWall(t, c, cfg, clock, redisClock, nil)
}

// replicaWall is replicaOn with wallClock as the clock that counts a
// suspended host's time (see leaseNow): nil, none.
func replicaWall(t testing.TB, c redis.UniversalClient, cfg Config, clock, redisClock, wallClock *floodgate.ManualClock) *Limiter {
	t.Helper()
	cfg.Clock = clock
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	l, err := newLimiter(c, cfg, func(l *Limiter) {
		l.s.redisClock = redisClock
		if wallClock != nil {
			l.s.wallClock = wallClock
		}
		l.s.margin = int64(1000 * time.Hour / time.Millisecond) // the test's clock is not Redis's
		l.p.box(l.p.rs())
		if l.s.lease != nil {
			l.s.lease.inline = true // renewals and returns at once, in order, on the manual clock
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// heldUnits is what l holds for key: its lease and the batch renewed
// ahead.
func heldUnits(l *Limiter, key string) int64 {
	st, ok := l.p.stateOK(key)
	if !ok {
		return 0
	}
	held := int64(0)
	for _, g := range []*grant{st.g.Load(), st.next.Load()} {
		if g != nil {
			held += max(0, g.units.Load())
		}
	}
	return held
}

// spendable is what l could spend for key now: its lease's and the
// batch renewed ahead's usable units, under the rule in force.
func spendable(l *Limiter, key string) int64 {
	st, ok := l.p.stateOK(key)
	if !ok {
		return 0
	}
	now, skew := l.s.leaseNow()
	held := int64(0)
	for _, g := range []*grant{st.g.Load(), st.next.Load()} {
		if g != nil && g.gen == l.p.rs().gen {
			held += l.s.lease.usable(g, g.units.Load(), now, skew)
		}
	}
	return held
}

// admission is one admitted request: when (µs of the script's clock), at
// what cost.
type admission struct{ at, n int64 }

// conforms replays admissions, in order, into the in-process limiter that
// decides as the script does: each must pass there too, or the replicas
// together admitted more than the rule.
func conforms(t *testing.T, l *Limiter, alg string, rule floodgate.Rule, adm []admission) {
	t.Helper()
	clock := floodgate.NewManualClock(0)
	ref, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: effective(t, l, alg, rule), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range adm {
		clock.Set(a.at)
		if d := ref.AllowN("k", a.n); !d.Allowed {
			t.Fatalf("%s %+v: admission %d of %d (cost %d at %d µs) is beyond the rule: %+v", alg, rule, i, len(adm), a.n, a.at, d)
		}
	}
}

// TestLeaseConformsToRule drives three lease-mode replicas of one key
// through random requests, weighted costs, sweeps, closes and restarts, at
// random instants of a manual clock, and replays every request they
// admitted into the in-process limiter, which must admit each one: every
// unit spent from a lease was taken from Redis first, and spent while
// Redis still counted it.
func TestLeaseConformsToRule(t *testing.T) {
	trials := 24
	if testmain.Quick() {
		trials = 8
	}
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(len(alg)), 22))
			total, leased, returned := 0, int64(0), int64(0)
			for trial := 0; trial < trials; trial++ {
				rule := randomRule(rng, alg)
				clock := floodgate.NewManualClock(epoch + rng.Int64N(int64(time.Hour)))
				cfg := Config{Algorithm: alg, Rule: rule, Prefix: fmt.Sprintf("conf%d", trial), FailureMode: FailClosed,
					Lease: Lease{Max: 1 + rng.Int64N(64), TTL: time.Duration(1+rng.IntN(20)) * time.Duration(max(rule.Period/10, time.Millisecond))}}
				_, kind, interval, err := parseRule(alg, rule)
				if err != nil {
					continue // a step Redis cannot hold
				}
				if kind == kindBucket {
					// The least TTL and Max that New takes: a batch must
					// last the floor, within the burst.
					if burst := time.Duration(rule.Capacity() * interval * 1000); cfg.Lease.TTL/2 > burst {
						cfg.Lease.TTL = 2 * burst
					}
					floor, _ := newLeases(nil, cfg.Lease).floor()
					cfg.Lease.Max = max(cfg.Lease.Max, ceilDiv(floor, interval*1000))
				}
				probe := mustNew(t, c, cfg)
				_ = probe.Close()
				var reps [3]*Limiter
				for i := range reps {
					reps[i] = replica(t, c, cfg, clock)
				}
				var adm []admission
				step := int64(rule.Period) / max(1, rule.Limit)
				for op := 0; op < 400; op++ {
					switch r := rng.IntN(20); {
					case r < 12:
						clock.Advance(time.Duration(rng.Int64N(step/2 + 1)))
					case r < 13:
						clock.Advance(time.Duration(rng.Int64N(3*step + 1)))
					}
					i := rng.IntN(len(reps))
					switch r := rng.IntN(40); {
					case r == 0:
						reps[i].s.lease.sweep(clock.Now())
						continue
					case r == 1:
						if err := reps[i].Close(); err != nil {
							t.Fatal(err)
						}
						s := reps[i].Stats()
						leased, returned = leased+s.Leased, returned+s.Returned
						reps[i] = replica(t, c, cfg, clock)
						continue
					}
					n := int64(1)
					if rng.IntN(5) == 0 {
						n = 1 + rng.Int64N(rule.Capacity())
					}
					d, err := reps[i].AllowN(ctx, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						adm = append(adm, admission{clock.Now() / 1000, n})
					}
				}
				for _, r := range reps {
					if s := r.Stats(); s.Fallbacks != 0 || s.Errors != 0 {
						t.Fatalf("Redis failed: %+v", s)
					}
					if err := r.Close(); err != nil {
						t.Fatal(err)
					}
					s := r.Stats()
					leased, returned = leased+s.Leased, returned+s.Returned
				}
				conforms(t, reps[0], alg, rule, adm)
				total += len(adm)
			}
			if leased == 0 || returned == 0 {
				t.Fatalf("the replicas leased %d units and returned %d: the test tried no lease", leased, returned)
			}
			t.Logf("%d admissions within the rule; %d units leased, %d returned", total, leased, returned)
		})
	}
}

// TestLeaseCleanShutdown: four replicas spend part of a key's allowance,
// each through leases, and close; then what they admitted plus what Redis
// reports remaining is the whole allowance, as if every request had gone
// to Redis one by one. Nothing is lost on a clean shutdown.
func TestLeaseCleanShutdown(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	for _, alg := range redisAlgorithms {
		for trial := 0; trial < 5; trial++ {
			rule := floodgate.Rule{Limit: 1000, Period: time.Hour}
			clock := floodgate.NewManualClock(epoch + int64(trial)*int64(time.Minute))
			cfg := Config{Algorithm: alg, Rule: rule, Prefix: fmt.Sprintf("shut%d", trial), Lease: Lease{Max: 1 + rng.Int64N(200)}}
			var reps []*Limiter
			for i := 0; i < 4; i++ {
				reps = append(reps, replica(t, c, cfg, clock))
			}
			admitted := int64(0)
			for i := 0; i < 200+rng.IntN(500); i++ {
				n := 1 + rng.Int64N(3)
				d, err := reps[rng.IntN(4)].AllowN(ctx, "k", n)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted += n
				}
			}
			var held, leased, returned int64
			for _, r := range reps {
				held += heldUnits(r, "k")
				before := r.Stats().Returned
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				if err := r.Close(); err != nil { // idempotent
					t.Fatal(err)
				}
				s := r.Stats()
				leased, returned = leased+s.Leased, returned+s.Returned-before
			}
			p, err := reps[0].Peek(ctx, "k") // closed: a plain round trip
			if err != nil {
				t.Fatal(err)
			}
			if admitted+p.Remaining+1 != rule.Limit || returned != held { // Peek's Remaining is after the request it peeks at
				t.Fatalf("%s trial %d: admitted %d, Redis has %d left (want %d in all); %d units held at Close, %d returned by it",
					alg, trial, admitted, p.Remaining, rule.Limit, held, returned)
			}
			if leased == 0 {
				t.Fatalf("%s: nothing was leased", alg)
			}
		}
	}
}

// TestLeaseBatchGrows: a hot key at a steady local rate takes batches that
// grow to last about half a TTL each (500 ms here), up to Max, so it needs
// a round trip per thousands of requests; a key at a modest rate takes
// smaller batches. A bucket's batch from a full bucket lasts as many steps
// as it has units, so it takes more units than the rate needs: enough to
// last half a TTL, here capped by Max (16,384 steps of 10 µs: 164 ms). The
// log's batch is sized for its hold, 100 ms.
func TestLeaseBatchGrows(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		clock := floodgate.NewManualClock(epoch)
		rule := floodgate.Rule{Limit: 100_000, Period: time.Second} // 10 µs a step
		l := replica(t, c, Config{Algorithm: alg, Rule: rule, Lease: Lease{Max: 16_384}}, clock)
		// 20,000 requests a second for 2 s, then 500 a second for 2 s.
		for i := 0; i < 40_000; i++ {
			clock.Advance(50 * time.Microsecond)
			if d, err := l.Allow(ctx, "hot"); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d: %+v, %v", alg, i, d, err)
			}
		}
		hot := l.Stats()
		for i := 0; i < 1000; i++ {
			clock.Advance(2 * time.Millisecond)
			if d, err := l.Allow(ctx, "hot"); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d: %+v, %v", alg, i, d, err)
			}
		}
		slow := l.Stats()
		slowCalls := slow.Calls - hot.Calls
		t.Logf("%s: %d round trips for 40,000 requests at 20K/s; %d for 1,000 at 500/s; %d units leased, %d lapsed",
			alg, hot.Calls, slowCalls, slow.Leased, slow.Lapsed)
		// At 20K/s a batch of 500 ms is 10,000 units (the log's, of 100
		// ms, 2,000): after the slow start, one round trip per thousands
		// of requests (and one more at each of a fixed window's edges).
		if hot.Calls > 50 {
			t.Errorf("%s: %d round trips for 40,000 requests at 20K/s; want at most 50", alg, hot.Calls)
		}
		// At 500/s, a batch of 250 units (the log's, 50), or a 64th of
		// what Redis has left if that is more (far from the limit, here
		// about 1,500: see TestLeaseQuietKeyBatch); for the buckets,
		// 16,384 units, which last 164 ms: 82 requests.
		if slowCalls > 1000/16+5 || slowCalls < 1 {
			t.Errorf("%s: %d round trips for 1,000 requests at 500/s; want 1 to %d", alg, slowCalls, 1000/16+5)
		}
	}
}

// TestLeaseFairness: four replicas that each want far more than a key's
// rule allows, for 20 s of the manual clock: the batch shrinks as Redis's
// remaining allowance falls, so no replica holds the remainder while
// another is refused, and each gets about a quarter.
func TestLeaseFairness(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		clock := floodgate.NewManualClock(epoch)
		rule := floodgate.Rule{Limit: 100, Period: time.Second}
		cfg := Config{Algorithm: alg, Rule: rule, Lease: Lease{Max: 1000}}
		var reps [4]*Limiter
		for i := range reps {
			reps[i] = replica(t, c, cfg, clock)
		}
		var got [4]int64
		total := int64(0)
		// Each millisecond, each replica tries 5 requests, the replicas in
		// a random order: 5,000 a second per replica against a rule of
		// 100.
		rng := rand.New(rand.NewPCG(4, 4))
		for ms := 0; ms < 20_000; ms++ {
			clock.Advance(time.Millisecond)
			for _, i := range rng.Perm(4) {
				for k := 0; k < 5; k++ {
					if d, err := reps[i].Allow(ctx, "k"); err != nil {
						t.Fatal(err)
					} else if d.Allowed {
						got[i]++
						total++
					}
				}
			}
		}
		lo, hi := got[0], got[0]
		for _, g := range got {
			lo, hi = min(lo, g), max(hi, g)
		}
		spread := float64(hi-lo) / (float64(total) / 4)
		calls := int64(0)
		for _, r := range reps {
			calls += r.Stats().Calls
		}
		t.Logf("%s: admitted %v (%d in all, the rule allows about %d), spread (max-min)/mean %.3f; %d round trips for %d requests",
			alg, got, total, 100*20, spread, calls, 20_000*20)
		if spread > 0.2 {
			t.Errorf("%s: admissions %v: spread %.2f of the mean; want at most 0.2", alg, got, spread)
		}
		if calls > 20_000*20/16 {
			t.Errorf("%s: %d round trips for %d requests: denials were not cached", alg, calls, 20_000*20)
		}
	}
}

// TestLeaseDenialCached: once Redis says a key has nothing left, with
// RetryAfter t, the replica denies it locally until t: a flood costs Redis
// nothing. At t the next request asks Redis again.
func TestLeaseDenialCached(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		clock := floodgate.NewManualClock(epoch)
		l := replica(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: 10, Period: time.Minute}, Lease: Lease{Max: 100}}, clock)
		for i := 0; i < 10; i++ {
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d: %+v, %v", alg, i, d, err)
			}
		}
		d, err := l.Allow(ctx, "k")
		if err != nil || d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("%s: the 11th request: %+v, %v", alg, d, err)
		}
		before := l.Stats().Calls
		for i := 0; i < 10_000; i++ {
			if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed {
				t.Fatalf("%s: flood request %d: %+v, %v", alg, i, d, err)
			}
		}
		if calls := l.Stats().Calls - before; calls != 0 {
			t.Fatalf("%s: a flood of 10,000 on a spent key made %d round trips", alg, calls)
		}
		clock.Advance(d.RetryAfter)
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("%s: after RetryAfter: %+v, %v", alg, d, err)
		}
		if calls := l.Stats().Calls - before; calls != 1 {
			t.Fatalf("%s: after RetryAfter, %d round trips; want 1", alg, calls)
		}
	}
}

// TestLeaseSingleFlight: while a key's refill waits on Redis (paused),
// every other request for the key waits for it instead of making a round
// trip of its own; then they are served from the batches that follow.
func TestLeaseSingleFlight(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	// The warm-up's lease lasts the test (TTL an hour): returned after a
	// second idle, it would add the bookkeeper's round trip to the count
	// of a run that a loaded machine made last that long.
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}, Lease: Lease{Max: 1000, TTL: time.Hour}, Timeout: time.Minute})
	defer l.Close()
	if _, err := l.Allow(ctx, "warm"); err != nil { // the script is loaded, a connection open
		t.Fatal(err)
	}
	srv.Pause()
	const goroutines = 64
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := l.Allow(ctx, "k"); err != nil {
				t.Error(err)
			} else if d.Allowed {
				admitted.Add(1)
			}
		}()
	}
	// Wait until every goroutine is in the key's refill: one leads, the
	// others wait for it, and the leader's round trip was sent (it is
	// counted as it goes; Redis, paused, holds its answer), so that the
	// count below is the one all 64 made, not a moment before the
	// leader's was counted.
	waitFor(t, func() bool {
		st, ok := l.p.stateOK("k")
		return ok && st.flight.Load() != nil && st.waiting.Load() == goroutines-1 && l.Stats().Calls >= 2
	})
	if calls := l.Stats().Calls; calls != 2 {
		t.Fatalf("%d round trips with %d requests in flight; want 2 (the warm-up and the leader)", calls, goroutines)
	}
	srv.Resume()
	wg.Wait()
	if admitted.Load() != goroutines {
		t.Fatalf("admitted %d of %d", admitted.Load(), goroutines)
	}
	// The leader took a batch of 1; the next leader knows the 63 that
	// waited and takes them all in one.
	if calls := l.Stats().Calls; calls > 4 {
		t.Fatalf("%d requests on one key made %d round trips; want at most 3 after the warm-up", goroutines, calls-1)
	}
}

// waitFor polls cond, yielding, until it holds; it fails the test after a
// minute (a hang, not a timing assertion).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the condition never held")
		}
		runtime.Gosched()
	}
}

// TestLeaseFailure: with Redis gone, a replica first spends what it holds,
// and then answers by its FailureMode; a lease never outlives its TTL as
// spendable allowance.
func TestLeaseFailure(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	clock := floodgate.NewManualClock(epoch)
	l := replica(t, c, Config{Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}, Lease: Lease{Max: 50, TTL: time.Second},
		FailureMode: FailClosed, Timeout: 200 * time.Millisecond}, clock)
	for i := 0; i < 200; i++ { // the batches grow to 50
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	held := heldUnits(l, "k")
	if held == 0 {
		t.Fatal("no lease held")
	}
	srv.Kill()
	for i := int64(0); i < held; i++ {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("request %d of the %d held, with Redis down: %+v, %v", i, held, d, err)
		}
	}
	if s := l.Stats(); s.Fallbacks != 0 {
		t.Fatalf("the held units were not spent first: %+v", s)
	}
	d, err := l.Allow(ctx, "k")
	if err != nil || d.Allowed || l.Stats().Fallbacks != 1 {
		t.Fatalf("past the lease with Redis down: %+v, %v, %+v; want FailClosed's denial", d, err, l.Stats())
	}
	// A lease whose TTL has run out is spent no more.
	srv.Restart()
	clock.Advance(time.Minute) // the breaker's probe is due
	for i := 0; i < 5; i++ {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if heldUnits(l, "k") == 0 {
		t.Fatal("no lease after Redis came back")
	}
	calls := l.Stats().Calls
	clock.Advance(time.Second)
	if _, err := l.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if l.Stats().Calls != calls+1 {
		t.Fatalf("a request after the lease's TTL was served from it")
	}
}

// TestLeaseSweepReturns: a key that goes quiet gives its unspent lease
// back after TTL, and its state is forgotten a TTL later.
func TestLeaseSweepReturns(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		clock := floodgate.NewManualClock(epoch)
		rule := floodgate.Rule{Limit: 1000, Period: time.Hour}
		l := replica(t, c, Config{Algorithm: alg, Rule: rule, Lease: Lease{Max: 100, TTL: time.Second}}, clock)
		for i := 0; i < 30; i++ {
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d: %+v, %v", alg, i, d, err)
			}
		}
		held := heldUnits(l, "k")
		l.s.lease.sweep(clock.Now())
		if l.Stats().Returned != 0 {
			t.Fatalf("%s: a lease within its TTL was returned", alg)
		}
		clock.Advance(time.Second)
		l.s.lease.sweep(clock.Now())
		if s := l.Stats(); s.Returned != held || held == 0 {
			t.Fatalf("%s: %d units held; %d returned after the TTL", alg, held, s.Returned)
		}
		if p, err := l.Peek(ctx, "k"); err != nil || p.Remaining != rule.Limit-31 {
			t.Fatalf("%s: after the return: %+v, %v; want %d remaining after the request Peek answers for", alg, p, err, rule.Limit-31)
		}
		clock.Advance(time.Second)
		l.s.lease.sweep(clock.Now())
		if _, ok := l.p.stateOK("k"); ok || l.s.lease.size.Load() != 0 {
			t.Fatalf("%s: an idle key's state outlived two TTLs", alg)
		}
	}
}

// TestLeaseWeightedCost: a cost above the held lease spends what is held
// and takes the rest in the same round trip; Redis's count stays exact.
func TestLeaseWeightedCost(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		clock := floodgate.NewManualClock(epoch)
		rule := floodgate.Rule{Limit: 1000, Period: time.Hour}
		l := replica(t, c, Config{Algorithm: alg, Rule: rule, Lease: Lease{Max: 3}}, clock)
		for i := 0; i < 10; i++ {
			if _, err := l.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		held := heldUnits(l, "k")
		calls, returned := l.Stats().Calls, l.Stats().Returned
		if d, err := l.AllowN(ctx, "k", 8); err != nil || !d.Allowed || held == 0 || held >= 8 {
			t.Fatalf("%s: cost 8 with %d held: %+v, %v", alg, held, d, err)
		}
		// One round trip decides it; a lease that the batch renewed ahead
		// replaced, too small for it, goes back in one more.
		trips := l.Stats().Calls - calls
		if l.Stats().Returned > returned {
			trips--
		}
		if trips != 1 {
			t.Fatalf("%s: cost 8 took %d round trips", alg, trips)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if p, err := l.Peek(ctx, "k"); err != nil || p.Remaining != rule.Limit-19 {
			t.Fatalf("%s: after 10 requests and a cost of 8, Peek says %+v, %v; want %d remaining after the one it peeks at", alg, p, err, rule.Limit-19)
		}
	}
}

// TestLeasePeekAndReset: Peek counts the lease held; Reset drops it, and
// the key is full again.
func TestLeasePeekAndReset(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		clock := floodgate.NewManualClock(epoch)
		rule := floodgate.Rule{Limit: 100, Period: time.Hour}
		l := replica(t, c, Config{Algorithm: alg, Rule: rule, Lease: Lease{Max: 10}}, clock)
		for i := 0; i < 20; i++ {
			if _, err := l.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		if p, err := l.Peek(ctx, "k"); err != nil || !p.Allowed || p.Remaining != 79 {
			t.Fatalf("%s: Peek after 20: %+v, %v; want 79 remaining (Redis's and the lease's, after the request it peeks at)", alg, p, err)
		}
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if _, ok := l.p.stateOK("k"); ok {
			t.Fatalf("%s: Reset left the lease", alg)
		}
		if p, err := l.Peek(ctx, "k"); err != nil || p.Remaining != 99 {
			t.Fatalf("%s: Peek after Reset: %+v, %v", alg, p, err)
		}
	}
}

// TestLeaseBound: at most Lease.MaxKeys keys hold a lease; the others
// are decided by a round trip each.
func TestLeaseBound(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	clock := floodgate.NewManualClock(epoch)
	l := replica(t, c, Config{Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}, Lease: Lease{Max: 100, MaxKeys: 10}}, clock)
	for i := 0; i < 100; i++ {
		for j := 0; j < 3; j++ {
			if d, err := l.Allow(ctx, fmt.Sprint("key-", i)); err != nil || !d.Allowed {
				t.Fatalf("%+v, %v", d, err)
			}
		}
	}
	if n := l.s.lease.states.Size(); n != 10 || l.s.lease.size.Load() != 10 {
		t.Fatalf("%d keys hold state; want 10", n)
	}
	// 10 keys with leases: 2 round trips each (1 + a batch of 1, then
	// more); 90 without: 3 each.
	if calls := l.Stats().Calls; calls < 90*3 || calls > 90*3+10*3 {
		t.Fatalf("%d round trips", calls)
	}
}

// TestLeaseHotPathAllocates nothing: a request served from a lease
// allocates nothing.
func TestLeaseHotPathAllocatesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	clock := floodgate.NewManualClock(epoch)
	l := replica(t, c, Config{Rule: floodgate.Rule{Limit: 1_000_000, Period: time.Second}, Lease: Lease{Max: 1 << 20, TTL: time.Hour}}, clock)
	for i := 0; i < 2000; i++ {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	calls := l.Stats().Calls
	if a := testing.AllocsPerRun(1000, func() {
		if d, _ := l.Allow(ctx, "k"); !d.Allowed {
			t.Fatal("denied")
		}
	}); a != 0 {
		t.Fatalf("Allow from a lease allocates %.1f times", a)
	}
	if l.Stats().Calls != calls {
		t.Fatal("the measured requests made round trips")
	}
}

// TestLeaseCloseWithoutLeases: Close is a no-op without lease mode, and
// after Close a lease-mode Limiter decides by round trips.
func TestLeaseCloseWithoutLeases(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	plain := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 10, Period: time.Hour}})
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err := plain.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 10, Period: time.Hour}, Prefix: "closed", Lease: Lease{Max: 10}})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	if s := l.Stats(); s.Calls != 3 || s.Leased != 0 {
		t.Fatalf("after Close: %+v; want a round trip per request and no lease", s)
	}
}

// TestLeaseStress races four replicas of 64 goroutines each, with
// GOMAXPROCS above the core count, on a few keys with weighted costs, on
// Redis's own clock, while each replica's sweeper returns leases whose
// 2 ms TTL ran out: no key passes its limit, and after every replica has
// closed, what was admitted plus what Redis has left is each key's whole
// allowance.
func TestLeaseStress(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2 * runtime.NumCPU()))
	srv := redistest.Start(t)
	ctx := context.Background()
	const limit, replicas, goroutines, keys = 500, 4, 64, 3
	attempts := 40
	if testmain.Quick() {
		attempts = 15
	}
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			rule := floodgate.Rule{Limit: limit, Period: 1000 * time.Hour}
			var admitted [keys]atomic.Int64
			var reps []*Limiter
			for r := 0; r < replicas; r++ {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 16})
				t.Cleanup(func() { _ = c.Close() })
				l := mustNew(t, c, Config{Algorithm: alg, Rule: rule, Prefix: "stress", FailureMode: FailClosed, Timeout: 10 * time.Second,
					Lease: Lease{Max: 40, TTL: 2 * time.Millisecond}})
				reps = append(reps, l)
			}
			var wg sync.WaitGroup
			for r := range reps {
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func(l *Limiter, seed uint64) {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(seed, 1))
						for i := 0; i < attempts; i++ {
							k := rng.IntN(keys)
							n := 1 + rng.Int64N(3)
							d, err := l.AllowN(ctx, fmt.Sprint("key-", k), n)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								admitted[k].Add(n)
							}
						}
					}(reps[r], uint64(r*goroutines+g))
				}
			}
			wg.Wait()
			var leased, returned int64
			for _, l := range reps {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				s := l.Stats()
				if s.Errors != 0 || s.Fallbacks != 0 {
					t.Fatalf("Redis failed: %+v", s)
				}
				leased, returned = leased+s.Leased, returned+s.Returned
			}
			for k := range admitted {
				p, err := reps[0].Peek(ctx, fmt.Sprint("key-", k))
				if err != nil {
					t.Fatal(err)
				}
				got, left := admitted[k].Load(), p.Remaining+1 // Peek's Remaining is after the request it answers for
				if !p.Allowed {
					left = 0
				}
				if got > limit || got+left != limit {
					t.Fatalf("key %d: admitted %d, Redis has %d left after the request Peek answers for; want at most %d, and %d in all",
						k, got, p.Remaining, limit, limit)
				}
			}
			t.Logf("admitted %d, %d, %d of %d each; %d units leased, %d returned", admitted[0].Load(), admitted[1].Load(), admitted[2].Load(), limit, leased, returned)
		})
	}
}

// TestLeaseRenewsAhead: at a steady rate, a key's next batch is taken
// before its lease runs out, so its requests stop making round trips of
// their own once the batches have grown; and what the renewals took is
// exact (a fresh limiter's Peek after Close).
func TestLeaseRenewsAhead(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		clock := floodgate.NewManualClock(epoch)
		rule := floodgate.Rule{Limit: 100_000, Period: time.Second}
		l := replica(t, c, Config{Algorithm: alg, Rule: rule, Lease: Lease{Max: 4096}}, clock)
		admitted := int64(0)
		for i := 0; i < 2000; i++ { // 10,000 a second: the batches grow
			clock.Advance(100 * time.Microsecond)
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d: %+v, %v", alg, i, d, err)
			}
			admitted++
		}
		warm := l.Stats()
		for i := 0; i < 5000; i++ {
			clock.Advance(100 * time.Microsecond)
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d: %+v, %v", alg, i, d, err)
			}
			admitted++
		}
		s := l.Stats()
		t.Logf("%s: %d refills and %d renewals while warming up; then %d and %d for 5,000 requests",
			alg, warm.Refills, warm.Renewals, s.Refills-warm.Refills, s.Renewals-warm.Renewals)
		// A window's lease ends with its window (every second here) and
		// the log's with its hold: a request may find the next batch not
		// yet usable there, once per edge.
		if s.Refills-warm.Refills > 1 || s.Renewals == warm.Renewals {
			t.Errorf("%s: after warming up, %d requests refilled and %d batches were renewed ahead", alg, s.Refills-warm.Refills, s.Renewals-warm.Renewals)
		}
	}
}

// TestLeaseCallerDeadline: a caller whose deadline ends before its refill's
// round trip does is abandoned, but the round trip is the key's: it runs
// to its own budget and its batch is kept, so callers sending deadlines
// too short for a round trip cannot drain a shared key's allowance; and
// the abandoned request keeps no charge: its unit joins the batch. A
// deadline's timer may fire after the round trip has answered (under
// emulation, on a loaded machine): then nobody was abandoned, and the
// test tries again on a fresh key, up to five times.
func TestLeaseCallerDeadline(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	for _, alg := range redisAlgorithms {
		for try := 0; ; try++ {
			if abandoned := leaseCallerDeadline(t, c, alg, "shared-"+strconv.Itoa(try)); abandoned > 0 {
				break
			}
			if try == 4 {
				t.Fatalf("%s: no caller was abandoned in five tries", alg)
			}
		}
	}
}

// leaseCallerDeadline is one try of TestLeaseCallerDeadline on key, and
// returns how many callers were abandoned.
func leaseCallerDeadline(t *testing.T, c *redis.Client, alg, key string) int64 {
	t.Helper()
	clock := floodgate.NewManualClock(epoch)
	rule := floodgate.Rule{Limit: 1000, Period: time.Hour}
	l := replica(t, c, Config{Algorithm: alg, Rule: rule, Lease: Lease{Max: 50}}, clock)
	admitted, abandoned := int64(0), int64(0)
	for i := 0; i < 300; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Microsecond)
		d, err := l.Allow(ctx, key)
		cancel()
		switch {
		case d.Allowed:
			admitted++
		case err != nil:
			abandoned++
		default:
			t.Fatalf("%s: request %d denied without an error: %+v", alg, i, d)
		}
	}
	s := l.Stats()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	// An abandoned request keeps no charge; no batch is lost.
	if admitted+p.Remaining+1 != rule.Limit || s.Opens != 0 {
		t.Fatalf("%s: %d admitted, %d abandoned, %d left after Close: %d units lost; %+v",
			alg, admitted, abandoned, p.Remaining+1, rule.Limit-admitted-p.Remaining-1, s)
	}
	t.Logf("%s: %d admitted from leases, %d abandoned while their round trip ran, %d round trips", alg, admitted, abandoned, s.Calls)
	return abandoned
}

// TestLeaseQuietKeyBatch: a key of a window or the log far from its
// limit takes batches larger than its demand, a sliver of what Redis has
// left, so that a quiet key makes few round trips; a key near its limit
// still takes batches the size of its demand. (A bucket's batch is sized
// by its steps: see TestLeaseBatchGrows.)
func TestLeaseQuietKeyBatch(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(epoch)
			far := replica(t, c, Config{Prefix: "quiet-far", Algorithm: alg, Rule: floodgate.Rule{Limit: 4_000_000, Period: time.Minute},
				Lease: Lease{Max: 5000}}, clock)
			near := replica(t, c, Config{Prefix: "quiet-near", Algorithm: alg, Rule: floodgate.Rule{Limit: 1000, Period: time.Hour},
				Lease: Lease{Max: 5000}}, clock)
			for _, l := range []*Limiter{far, near} {
				for i := range 3 {
					if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
						t.Fatalf("request %d: %+v, %v", i, d, err)
					}
					clock.Advance(10 * time.Millisecond)
				}
			}
			if held := heldUnits(far, "k"); held < 1000 && alg != floodgate.TokenBucket && alg != floodgate.LeakyBucket {
				t.Errorf("far from the limit, after 3 requests: %d units held, want a batch of 1000 or more", held)
			}
			if held := heldUnits(near, "k"); held > 1000/64 {
				t.Errorf("near the limit, after 3 requests: %d units held, want at most %d", held, 1000/64)
			}
		})
	}
}

// TestLeaseWindowEnd: a fixed window's batch ends with its window. It is
// not renewed ahead on time (a batch renewed in the same window would end
// with it too), and once the window is over its unspent units are not
// sent back (the script would give nothing back to an ended window), so a
// key costs one round trip a window; the next batch is not cut short by
// the units of the batch that ended.
func TestLeaseWindowEnd(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	clock := floodgate.NewManualClock(epoch)
	l := replica(t, c, Config{Algorithm: floodgate.FixedWindow, Rule: floodgate.Rule{Limit: 1_000_000, Period: time.Second},
		Lease: Lease{Max: 1000, TTL: 2 * time.Second}}, clock)
	clock.Set(1_700_000_000 * int64(time.Second)) // a window's start
	allow := func(i int) {
		t.Helper()
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	for i := range 20 {
		allow(i)
	}
	// 20 requests over most of the window: no round trip on time.
	calls := l.Stats().Calls
	for i := range 20 {
		clock.Advance(40 * time.Millisecond)
		allow(i)
	}
	if got := l.Stats().Calls - calls; got != 0 {
		t.Errorf("%d round trips within the window, for a batch that lasts it", got)
	}
	held := heldUnits(l, "k")
	if held == 0 {
		t.Fatal("no lease held")
	}
	clock.Advance(500 * time.Millisecond) // the window is over
	l.s.lease.sweep(clock.Now())
	if s := l.Stats(); s.Returned != 0 || s.Calls != calls {
		t.Fatalf("an ended window's batch went back: %+v", s)
	}
	allow(0) // the next window's first request takes a batch
	if got := heldUnits(l, "k"); got < 500 {
		t.Errorf("the next window's batch holds %d units: cut short by the ended batch's %d", got, held)
	}
}

// TestLeasePeekTakesLease: in lease mode, a check (Peek) of a key that
// holds no lease takes one in the round trip that answers it, and charges
// nothing: the checks and requests after it are answered from the lease,
// and once the lease goes back Redis holds only the requests. The sliding
// log's checks stay dry runs, a round trip each (its unit would go back
// by a round trip of its own).
func TestLeasePeekTakesLease(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(epoch)
			rule := floodgate.Rule{Limit: 100, Period: time.Hour}
			cfg := Config{Algorithm: alg, Rule: rule, Prefix: "peek-" + alg}
			lease := cfg
			lease.Lease = Lease{Max: 10}
			l := replica(t, c, lease, clock)
			for i := range 5 {
				p, err := l.Peek(ctx, "k")
				if err != nil || !p.Allowed || p.Remaining != 99 {
					t.Fatalf("check %d: %+v, %v; want allowed with 99 remaining (after the request it peeks at)", i, p, err)
				}
			}
			want := int64(1)
			if alg == floodgate.SlidingLog {
				want = 5
			}
			if calls := l.Stats().Calls; calls != want {
				t.Fatalf("5 checks made %d round trips; want %d", calls, want)
			}
			for range 3 {
				if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
					t.Fatalf("%+v, %v", d, err)
				}
			}
			if alg != floodgate.SlidingLog {
				// A key's first batch is small (1 unit and the check's),
				// and grows as the key spends: one refill at most.
				if calls := l.Stats().Calls; calls > 2 {
					t.Fatalf("3 requests after the checks made %d round trips; want at most 1 (the checks' lease serves the first two)", calls-1)
				}
			}
			if p, err := l.Peek(ctx, "k"); err != nil || p.Remaining != 96 {
				t.Fatalf("check after 3 requests: %+v, %v; want 96 remaining", p, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			plain := replica(t, c, cfg, clock)
			if p, err := plain.Peek(ctx, "k"); err != nil || p.Remaining != 96 {
				t.Fatalf("Redis after the lease went back: %+v, %v; want 96 remaining (3 requests charged, no check)", p, err)
			}
		})
	}
}

// TestLeaseGiveBackPaysDebt: units a replica leased and gives back after
// another replica has charged the key into debt pay that debt, as they
// would pay a request: once they are back, Redis holds exactly what was
// charged, and a key that owes less than they bring is admitted again.
// (A bucket's give-back that is not the last of the TAT is kept as
// credits; before they counted against a debt, the key stayed refused
// and Redis read as holding the whole budget.) A sliding log's give-back
// at the instant of a later entry lapses: there, at least what was
// charged.
func TestLeaseGiveBackPaysDebt(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			const limit = 1000
			clock := floodgate.NewManualClock(int64(time.Hour))
			prefix := "paydebt-" + alg
			leasing := leaseStore(t, srv, prefix, clock)
			plain := frozenStore(t, srv, Config{Prefix: prefix, Timeout: 10 * time.Second}, clock)
			rule := floodgate.Rule{Limit: limit, Period: time.Hour}
			pl := mustPolicy(t, leasing, "budget", alg, rule)
			pp := mustPolicy(t, plain, "budget", alg, rule)
			charge := func(s *Store, p floodgate.StorePolicy, n int64) {
				t.Helper()
				if _, err := s.Charge(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: n}}, nil); err != nil {
					t.Fatal(err)
				}
			}
			for range 40 {
				charge(leasing, pl, 1)
			}
			before := heldOn(t, pp, "k", limit) // the 40 and the lease
			if before < 40+11 {
				t.Fatalf("Redis holds %d after 40 units in lease mode: want a lease of more than the debt of 10 to come", before)
			}
			charge(plain, pp, limit-before+10) // 10 past the budget while the lease is out
			if d, err := pp.Peek(ctx, "k"); err != nil || d.Allowed || d.Owed != 10 {
				t.Fatalf("with the lease out: %+v, %v; want refused, owing 10", d, err)
			}
			if err := leasing.Close(); err != nil {
				t.Fatal(err)
			}
			total := 40 + limit - before + 10
			got := heldOn(t, pp, "k", limit)
			if got != total && !(alg == floodgate.SlidingLog && got > total) {
				t.Fatalf("after the lease went back, Redis holds %d taken; %d were charged", got, total)
			}
			if d, err := pp.Peek(ctx, "k"); err != nil || (alg != floodgate.SlidingLog && !d.Allowed) {
				t.Fatalf("after %d units of lease paid a debt of 10: %+v, %v; want admitted", before-40, d, err)
			}
		})
	}
}
