package redislimit

import (
	"context"
	"fmt"
	"runtime"
	"slices"
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

// clusterClient returns a client of cl with go-redis's default options,
// but for ContextTimeoutEnabled, which redislimit requires. It closes the
// client when t ends, and then waits for the slot-map reload that the
// client may still run in the background (it sleeps 200 ms after each), so
// that no goroutine outlives the test.
func clusterClient(t *testing.T, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	t.Cleanup(func() { waitNoReload(t) }) // runs after the Close below
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitNoReload polls until no goroutine runs go-redis's lazy reload of a
// cluster's slot map.
func waitNoReload(t *testing.T) {
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); ; {
		n := runtime.Stack(buf, true)
		if !strings.Contains(string(buf[:n]), "clusterStateHolder).LazyReload") {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("go-redis's slot-map reload still runs 5 s after the client closed:\n%s", buf[:n])
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spread returns one client id per master of cl whose Redis key (under
// l) that master serves, and fails the test unless they are on as many
// different masters as the cluster has.
func spread(t *testing.T, cl *redistest.Cluster, l *Limiter) []string {
	t.Helper()
	masters := cl.Masters()
	byMaster := map[string]string{}
	for i := 0; len(byMaster) < len(masters) && i < 200; i++ {
		id := fmt.Sprintf("client-%d", i)
		if m := cl.MasterFor(l.redisKey(id)); byMaster[m] == "" {
			byMaster[m] = id
		}
	}
	var keys, on []string
	for _, m := range masters {
		keys, on = append(keys, byMaster[m]), append(on, m)
	}
	if len(masters) != 3 || len(byMaster) != len(masters) || slices.Contains(keys, "") {
		t.Fatalf("keys %q on masters %q: want one key on each of 3 masters", keys, on)
	}
	for i, k := range keys {
		if m := cl.MasterFor(l.redisKey(k)); m != on[i] {
			t.Fatalf("%q is on %s, not %s", k, m, on[i])
		}
	}
	return keys
}

// TestCluster runs every algorithm on a Redis Cluster of three masters
// and three replicas, per request and in lease mode: goroutines race on
// three keys, one on each master, and the cluster admits exactly the rule
// per key (lease mode: at most the rule, and after Close what was
// admitted plus what Redis has left is the whole rule), with no error.
// Peek and Reset work on keys of every master.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := clusterClient(t, cl)
	ctx := context.Background()
	rule := floodgate.Rule{Limit: 100, Period: 10_000 * time.Hour}
	const goroutines = 8
	rounds := 40 // per goroutine and key: 3.2 times the rule
	if testmain.Quick() {
		rounds = 25 // twice the rule
	}
	for _, alg := range redisAlgorithms {
		for _, leased := range []bool{false, true} {
			mode := "per-request"
			if leased {
				mode = "lease"
			}
			t.Run(alg+"/"+mode, func(t *testing.T) {
				// A Timeout generous enough for a busy machine: this
				// test wants every decision from Redis.
				cfg := Config{Algorithm: alg, Rule: rule, Prefix: "cluster-" + mode, FailureMode: FailClosed, Timeout: 5 * time.Second}
				if leased {
					cfg.Lease = Lease{Max: 16}
				}
				l := mustNew(t, c, cfg)
				t.Cleanup(func() { _ = l.Close() })
				keys := spread(t, cl, l)
				admitted := make([]atomic.Int64, len(keys))
				var wg sync.WaitGroup
				errs := make(chan error, goroutines)
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < rounds; i++ {
							for k, key := range keys {
								d, err := l.Allow(ctx, key)
								if err != nil {
									errs <- err
									return
								}
								if d.Allowed {
									admitted[k].Add(1)
								}
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				if s := l.Stats(); s.Errors != 0 || s.Fallbacks != 0 {
					t.Fatalf("Stats = %+v: want no error and no fallback", s)
				}
				if !leased {
					for k, key := range keys {
						if n := admitted[k].Load(); n != rule.Limit {
							t.Errorf("%q on %s: admitted %d, want exactly %d", key, cl.MasterFor(l.redisKey(key)), n, rule.Limit)
						}
					}
					peekAndReset(t, cl, l, keys, rule.Limit)
					return
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				if s := l.Stats(); s.Errors != 0 || s.Leased == 0 {
					t.Fatalf("Stats after Close = %+v: want no error, and leases taken", s)
				}
				cfg.Lease = Lease{}
				fresh := mustNew(t, c, cfg)
				for k, key := range keys {
					n := admitted[k].Load()
					p, err := fresh.Peek(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					// Peek's Remaining is after the request it peeks at;
					// it is 0 too when nothing is left.
					left := p.Remaining + 1
					if !p.Allowed {
						left = 0
					}
					if n > rule.Limit || n+left != rule.Limit {
						t.Errorf("%q on %s: admitted %d, Redis has %d left after one more: want at most %d, and %[5]d in all",
							key, cl.MasterFor(l.redisKey(key)), n, p.Remaining, rule.Limit)
					}
				}
				if s := fresh.Stats(); s.Errors != 0 || s.Fallbacks != 0 {
					t.Fatalf("Stats = %+v: want no error and no fallback", s)
				}
			})
		}
	}
}

// peekAndReset checks, on keys whose allowance is spent, that Peek says
// so and changes nothing, and that Reset makes one key full again and
// leaves the others spent.
func peekAndReset(t *testing.T, cl *redistest.Cluster, l *Limiter, keys []string, limit int64) {
	t.Helper()
	ctx := context.Background()
	for _, key := range keys {
		for i := 0; i < 2; i++ {
			if p, err := l.Peek(ctx, key); err != nil || p.Allowed || p.Remaining != 0 {
				t.Fatalf("Peek(%q) on %s = %+v, %v; want a denial", key, cl.MasterFor(l.redisKey(key)), p, err)
			}
		}
	}
	for _, reset := range keys {
		if err := l.Reset(ctx, reset); err != nil {
			t.Fatal(err)
		}
		if p, err := l.Peek(ctx, reset); err != nil || !p.Allowed || p.Remaining != limit-1 {
			t.Fatalf("Peek(%q) on %s after Reset = %+v, %v; want %d remaining", reset, cl.MasterFor(l.redisKey(reset)), p, err, limit-1)
		}
		if d, err := l.Allow(ctx, reset); err != nil || !d.Allowed || d.Remaining != limit-1 {
			t.Fatalf("Allow(%q) after Reset = %+v, %v; want admitted, %d remaining", reset, d, err, limit-1)
		}
		for _, other := range keys {
			if other == reset {
				continue
			}
			if d, err := l.Allow(ctx, other); err != nil || d.Allowed {
				t.Fatalf("Allow(%q) after Reset(%q) = %+v, %v; want a denial", other, reset, d, err)
			}
		}
		// Spend it again for the next round.
		for i := int64(1); i < limit; i++ {
			if d, err := l.Allow(ctx, reset); err != nil || !d.Allowed {
				t.Fatalf("Allow(%q) %d after Reset = %+v, %v", reset, i, d, err)
			}
		}
	}
	if s := l.Stats(); s.Errors != 0 || s.Fallbacks != 0 {
		t.Fatalf("Stats = %+v: want no error and no fallback", s)
	}
}

// failoverSlack is what a call may take beyond the Limiter's Timeout while
// a master dies and its replica takes over.
const failoverSlack = 250 * time.Millisecond

// TestClusterFailover kills the master that serves a key while goroutines
// call Allow on it, with FailClosed and the default Timeout, and the
// client's default options: every call ends within Timeout plus
// failoverSlack; within 5 s of the replica's promotion Redis decides
// again (the Limiter asks go-redis to reload the slot map, see
// serverFailed), and then every call reaches it. It logs how many
// admissions the asynchronous replication lost. Per request, then in
// lease mode (a second master is killed, on the same cluster); the quick
// form runs the first only.
func TestClusterFailover(t *testing.T) {
	cl := redistest.StartCluster(t)
	t.Run("per-request", func(t *testing.T) { failover(t, cl, false) })
	if !testmain.Quick() {
		t.Run("lease", func(t *testing.T) { failover(t, cl, true) })
	}
}

// sample is one call: when it started and ended, and whether it passed.
type sample struct {
	start, end time.Time
	allowed    bool
}

func failover(t *testing.T, cl *redistest.Cluster, leased bool) {
	c := clusterClient(t, cl)
	ctx := context.Background()
	mode := "per-request"
	if leased {
		mode = "lease"
	}
	// A fixed window this long counts every admission without refilling,
	// so the count Redis holds afterwards says what it lost.
	rule := floodgate.Rule{Limit: 1_000_000, Period: 10_000 * time.Hour}
	var lastErr atomic.Value
	cfg := Config{Algorithm: floodgate.FixedWindow, Rule: rule, Prefix: "failover-" + mode, FailureMode: FailClosed,
		Timeout: defaultTimeout, // the default, which the test measures (mustNew's would be longer)
		OnError: func(err error) { lastErr.Store(err.Error()) }}
	if leased {
		cfg.Lease = Lease{Max: 16}
	}
	if err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, c, cfg)
	t.Cleanup(func() { _ = l.Close() })
	var key, master string
	for i := 0; key == ""; i++ {
		if i == 100 {
			t.Fatal("no key on a master with a live replica")
		}
		id := fmt.Sprintf("client-%d", i)
		if m := cl.MasterFor(l.redisKey(id)); len(cl.Replicas(m)) > 0 {
			key, master = id, m
		}
	}
	// The first calls dial, load the slot map and the script, within the
	// Timeout of 100 ms; they may not, on a busy machine, or when the
	// client tries the master that the lease subtest's predecessor killed
	// first (go-redis dials a dead node 5 times, 100 ms apart). Warm up
	// until Redis admits one.
	warm := int64(0)
	waitUntil(t, "admission before the kill", 10*time.Second, func() bool {
		d, err := l.Allow(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			warm++
		}
		return d.Allowed
	})
	if s := l.Stats(); s.Fallbacks != 0 {
		t.Logf("%s: %d fallbacks while warming up; the last error: %v", mode, s.Fallbacks, lastErr.Load())
	}

	const goroutines = 4
	var (
		stop       atomic.Bool
		admitted   atomic.Int64 // admissions so far
		killedAt   atomic.Int64 // when the master's process had exited (Unix ns), 0 before
		deniedAt   atomic.Int64 // when the first call started after killedAt was denied
		recovered  atomic.Int64 // when the first call started after deniedAt was admitted
		afterwards atomic.Int64 // calls that ended after recovered
		wg         sync.WaitGroup
		samples    = make([][]sample, goroutines)
		errs       = make(chan error, goroutines)
	)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				start := time.Now()
				d, err := l.Allow(ctx, key)
				end := time.Now()
				if err != nil {
					errs <- err
					return
				}
				samples[g] = append(samples[g], sample{start, end, d.Allowed})
				k := killedAt.Load()
				switch {
				case k == 0:
				case !d.Allowed && start.UnixNano() > k:
					deniedAt.CompareAndSwap(0, end.UnixNano())
				case d.Allowed:
					// Admitted after a denial: the lease was empty,
					// so Redis (the promoted replica) decided.
					if den := deniedAt.Load(); den != 0 && start.UnixNano() > den {
						recovered.CompareAndSwap(0, end.UnixNano())
					}
				}
				if d.Allowed {
					admitted.Add(1)
				}
				if recovered.Load() != 0 {
					afterwards.Add(1)
				}
				// A client's pace, rather than a spin on the fallback's
				// instant denials.
				time.Sleep(time.Millisecond)
			}
		}()
	}
	finish := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer finish()
	waitUntil(t, "300 admissions before the kill", 10*time.Second, func() bool { return admitted.Load() >= 300 })

	cl.Kill(master)
	killed := time.Now()
	killedAt.Store(killed.UnixNano())
	newMaster, promoted := cl.WaitPromoted(master, killed.Add(30*time.Second))
	for recovered.Load() == 0 && time.Now().Before(promoted.Add(5*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	if recovered.Load() == 0 {
		finish()
		t.Fatalf("%s killed, %s promoted %v later: no call admitted by Redis within 5 s; Stats = %+v",
			master, newMaster, promoted.Sub(killed).Round(time.Millisecond), l.Stats())
	}
	// Then the fallbacks stop: every call reaches Redis.
	waitUntil(t, "100 calls after the recovery", 10*time.Second, func() bool { return afterwards.Load() >= 100 })
	steady := l.Stats()
	waitUntil(t, "300 calls after the recovery", 10*time.Second, func() bool { return afterwards.Load() >= 300 })
	settled := l.Stats()
	finish()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if settled.Fallbacks != steady.Fallbacks || settled.Calls == steady.Calls {
		t.Errorf("after the recovery, fallbacks went on: %d, then %d; calls to Redis %d, then %d",
			steady.Fallbacks, settled.Fallbacks, steady.Calls, settled.Calls)
	}
	if settled.Reloads == 0 {
		t.Errorf("Stats = %+v: the slot map was never reloaded", settled)
	}

	var all []sample
	for _, s := range samples {
		all = append(all, s...)
	}
	lat := make([]time.Duration, len(all))
	before, after := warm, int64(0)
	var slowest sample
	for i, s := range all {
		lat[i] = s.end.Sub(s.start)
		if lat[i] > slowest.end.Sub(slowest.start) {
			slowest = s
		}
		switch {
		case !s.allowed:
		case s.start.Before(killed):
			before++
		default:
			after++
		}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	bound := defaultTimeout + failoverSlack
	recoveredAt := time.Unix(0, recovered.Load())
	t.Logf("%s: %s killed; %s promoted %v later; Redis decided again %v after the promotion (%d reloads of the slot map, %d fallbacks)",
		mode, master, newMaster, promoted.Sub(killed).Round(time.Millisecond), recoveredAt.Sub(promoted).Round(time.Millisecond),
		settled.Reloads, settled.Fallbacks)
	t.Logf("%s: %d calls: latency p50 %v, p99 %v, max %v (bound %v), the slowest started %v after the kill",
		mode, len(lat), pct(0.5), pct(0.99), lat[len(lat)-1], bound, slowest.start.Sub(killed).Round(time.Millisecond))
	if worst := lat[len(lat)-1]; worst > bound {
		t.Errorf("a call took %v (started %v after the kill), beyond Timeout + %v", worst, slowest.start.Sub(killed), failoverSlack)
	}

	// What the promoted replica counts, against what was admitted.
	if err := l.Close(); err != nil {
		t.Logf("%s: Close: %v", mode, err)
	}
	cfg.Lease, cfg.Timeout = Lease{}, 5*time.Second
	fresh := mustNew(t, c, cfg)
	p, err := fresh.Peek(ctx, key)
	if err != nil || fresh.Stats().Fallbacks != 0 {
		t.Fatalf("Peek on the promoted replica = %+v, %v; Stats = %+v", p, err, fresh.Stats())
	}
	counted := rule.Limit - p.Remaining - 1 // Peek's Remaining is after the request it peeks at
	s := l.Stats()
	// Lost: admitted, but not in the promoted replica's count. A negative
	// figure is the calls in flight at the kill that the old master ran
	// and replicated, but whose replies were lost: charged, and denied.
	t.Logf("%s: admitted %d before the kill and %d after; %s counts %d: %d admissions lost to asynchronous replication (leased %d, returned %d, lapsed %d)",
		mode, before, after, newMaster, counted, before+after-counted, s.Leased, s.Returned, s.Lapsed)
}

// waitUntil polls cond until it holds, or fails the test after limit.
func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
