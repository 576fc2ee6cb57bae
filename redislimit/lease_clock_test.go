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

// TestLeaseStalledClockConforms: a lease-mode replica whose Config.Clock
// has stalled (the extreme of a lagging or coarse clock) holds batches
// while Redis's clock runs on, and a replica without leases takes
// whatever Redis has left, four times faster than the rule. Every request
// the two admitted, replayed into the in-process limiter, passes there: a
// batch is timed on Redis's clock, so no unit is spent after Redis stopped
// counting it (the next window, a paid debt, a log entry's stamp), however
// far Config.Clock lags.
func TestLeaseStalledClockConforms(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		stalled := floodgate.NewManualClock(epoch)
		rc := floodgate.NewManualClock(epoch + int64(900*time.Millisecond)) // Redis's: near a window's end
		rule := floodgate.Rule{Limit: 1000, Period: time.Second}
		cfg := Config{Algorithm: alg, Rule: rule, Prefix: "stalled", FailureMode: FailClosed, Lease: Lease{Max: 64}}
		leased := replicaOn(t, c, cfg, stalled, rc)
		cfg.Lease = Lease{}
		plain := replicaOn(t, c, cfg, rc, rc)
		var adm []admission
		fromLease := 0
		for ms := 0; ms < 3000; ms++ {
			rc.Advance(time.Millisecond)
			for i, l := range []*Limiter{leased, leased, plain, plain, plain} {
				d, err := l.Allow(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					adm = append(adm, admission{rc.Now() / 1000, 1})
					if i < 2 {
						fromLease++
					}
				}
			}
		}
		if s := leased.Stats(); s.Leased == 0 || fromLease == 0 || s.Errors != 0 {
			t.Fatalf("%s: the leasing replica admitted %d: %+v", alg, fromLease, s)
		}
		conforms(t, leased, alg, rule, adm)
		t.Logf("%s: %d admitted, %d of them by the replica whose clock stalled", alg, len(adm), fromLease)
	}
}

// TestLeaseStalledClockDenial: a denial cached by a replica whose
// Config.Clock has stalled ends when Redis's clock says it does: three
// windows (or the bucket's refill) later, the next request asks Redis
// again and passes.
func TestLeaseStalledClockDenial(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		stalled := floodgate.NewManualClock(epoch)
		rc := floodgate.NewManualClock(epoch)
		rule := floodgate.Rule{Limit: 10, Period: time.Minute}
		l := replicaOn(t, c, Config{Algorithm: alg, Rule: rule, Prefix: "staldeny", Lease: Lease{Max: 100}}, stalled, rc)
		for i := 0; i < 10; i++ {
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d: %+v, %v", alg, i, d, err)
			}
		}
		if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed {
			t.Fatalf("%s: the 11th request: %+v, %v", alg, d, err)
		}
		rc.Advance(3 * time.Minute)
		calls := l.Stats().Calls
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("%s: three periods later on Redis's clock, Config.Clock stalled: %+v, %v", alg, d, err)
		}
		if l.Stats().Calls == calls {
			t.Fatalf("%s: the request after the denial's end made no round trip", alg)
		}
	}
}

// laggingClock reads the system clock lag behind: a coarse clock at its
// worst.
type laggingClock struct{ lag time.Duration }

func (c laggingClock) Now() int64 { return time.Now().Add(-c.lag).UnixNano() }

// TestLeaseLaggingClockRealRedis: four replicas of eight goroutines each,
// in production form (Redis's own clock, renewals by the background
// goroutine), with a Config.Clock that lags 20 ms or never moves, spend a
// fixed window of 200 per 50 ms with costs of 1 to 4 (a load that runs,
// not a sleep). The requests that began and ended inside one window of
// Redis's clock (this machine's wall clock: the same clock) were admitted
// for at most 200 in all, and in most windows where such requests asked
// for more than 200 they were admitted for more than half of it: a batch
// taken in a window is spent in no other, and a denial ends with its
// window, whatever Config.Clock says. The run goes on until two dozen
// windows (a dozen in the quick form) were asked for more than 200,
// however slowly a loaded machine gets there.
func TestLeaseLaggingClockRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		clock floodgate.Clock
	}{{"lagging", laggingClock{20 * time.Millisecond}}, {"stalled", floodgate.NewManualClock(epoch)}} {
		t.Run(tc.name, func(t *testing.T) { laggingClockRun(t, srv, tc.clock) })
	}
}

// laggingWindow is what the requests that began and ended inside one
// window asked for, and what they were admitted.
type laggingWindow struct{ asked, admitted int64 }

func laggingClockRun(t *testing.T, srv *redistest.Server, clock floodgate.Clock) {
	ctx := context.Background()
	const limit, period, replicas, goroutines = 200, 50 * time.Millisecond, 4, 8
	want := 24 // windows asked for more than the limit, before the run ends
	if testmain.Quick() {
		want = 12
	}
	var reps []*Limiter
	prefix := fmt.Sprintf("lagging%d", time.Now().UnixNano())
	for r := 0; r < replicas; r++ {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 8})
		t.Cleanup(func() { _ = c.Close() })
		l := mustNew(t, c, Config{Algorithm: floodgate.FixedWindow, Rule: floodgate.Rule{Limit: limit, Period: period},
			Prefix: prefix, FailureMode: FailClosed, Timeout: 10 * time.Second, Clock: clock, Lease: Lease{Max: 64}})
		t.Cleanup(func() { _ = l.Close() })
		reps = append(reps, l)
	}
	var mu sync.Mutex
	windows := map[int64]*laggingWindow{} // by window index
	var contested []int64                 // the windows whose requests asked for more than the limit
	latest := int64(0)                    // the latest window a request was counted in
	deadline := time.Now().Add(2 * time.Minute)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for r := range reps {
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func(l *Limiter, seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 3))
				for !stop.Load() {
					n := 1 + rng.Int64N(4)
					began := time.Now().UnixMicro()
					d, err := l.AllowN(ctx, "k", n)
					ended := time.Now().UnixMicro()
					if err != nil {
						t.Error(err)
						stop.Store(true)
						return
					}
					// Every goroutine takes its turn, so that no replica's
					// batch waits unspent for a goroutine to be scheduled.
					runtime.Gosched()
					w := began / period.Microseconds()
					if ended/period.Microseconds() != w {
						continue // it straddles two windows: counted in neither
					}
					mu.Lock()
					win := windows[w]
					if win == nil {
						win = &laggingWindow{}
						windows[w] = win
					}
					if win.asked <= limit && win.asked+n > limit {
						contested = append(contested, w)
					}
					win.asked += n
					if d.Allowed {
						win.admitted += n
					}
					if w > latest { // the windows before w are over: count them
						latest = w
						over := 0
						for _, c := range contested {
							if c < w {
								over++
							}
						}
						if over >= want || time.Now().After(deadline) {
							stop.Store(true)
						}
					}
					mu.Unlock()
				}
			}(reps[r], uint64(r*goroutines+g))
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	full := 0
	for w, win := range windows {
		if win.admitted > limit {
			t.Errorf("window %d: %d admitted by calls inside it; the rule allows %d", w, win.admitted, limit)
		}
		if win.asked > limit && win.admitted > limit/2 {
			full++
		}
	}
	if len(contested) < want {
		t.Fatalf("in 2 minutes, %d windows were asked for more than the limit, not %d: the test tried nothing", len(contested), want)
	}
	var leased int64
	for _, l := range reps {
		s := l.Stats()
		if s.Errors != 0 || s.Fallbacks != 0 {
			t.Fatalf("Redis failed: %+v", s)
		}
		leased += s.Leased
	}
	if leased == 0 || full < len(contested)/2 {
		var spent []string
		for _, w := range contested {
			spent = append(spent, fmt.Sprintf("%d of %d", windows[w].admitted, windows[w].asked))
		}
		t.Fatalf("%d units leased; %d of %d windows asked for more than the limit had more than half of it admitted (%s): leases or denials outlived their windows",
			leased, full, len(contested), strings.Join(spent, ", "))
	}
	t.Logf("%d windows seen, %d asked for more than the limit, %d of them more than half spent; %d units leased", len(windows), len(contested), full, leased)
}

// TestLeaseCloseWaitsForRefill: a refill whose round trip is still
// running (Redis paused) when Close is called is waited for, and the batch
// it took goes back with the rest; then the client is closed, as shutdown
// code does right after Close. What the requests were admitted plus what
// Redis has left is the whole allowance: nothing was lost.
func TestLeaseCloseWaitsForRefill(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	rule := floodgate.Rule{Limit: 1000, Period: time.Hour}
	cfg := Config{Rule: rule, Prefix: "closeflight", Lease: Lease{Max: 100}, Timeout: time.Minute}
	l := mustNew(t, c, cfg)
	admitted := int64(0)
	for i := 0; i < 30; i++ { // the batches grow
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		admitted++
	}
	before := l.Stats()
	srv.Pause()
	type answer struct {
		d   floodgate.Decision
		err error
	}
	allowed := make(chan answer, 1)
	go func() { // a cost beyond what a lease holds: a refill, with the next batch
		d, err := l.AllowN(ctx, "k", 200)
		allowed <- answer{d, err}
	}()
	waitFor(t, func() bool { return l.Stats().Refills > before.Refills })
	closed := make(chan error, 1)
	go func() {
		err := l.Close()
		_ = c.Close() // shutdown goes on at once
		closed <- err
	}()
	// Close has begun, and counts the refill in flight: it waits for it.
	waitFor(t, func() bool {
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) with a refill in flight", err)
		default:
		}
		l.s.lease.mu.Lock()
		defer l.s.lease.mu.Unlock()
		return l.s.lease.closing && l.s.lease.flights > 0
	})
	srv.Resume()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	a := <-allowed
	if a.err != nil || !a.d.Allowed {
		t.Fatalf("the refill's request: %+v, %v", a.d, a.err)
	}
	admitted += 200
	s := l.Stats()
	if s.Leased == before.Leased || s.Returned == before.Returned || s.Fallbacks != 0 {
		t.Fatalf("before Close %+v; after %+v: the refill leased nothing, or Close returned nothing", before, s)
	}
	p := mustNew(t, client(t, srv), Config{Rule: rule, Prefix: cfg.Prefix})
	d, err := p.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if left := d.Remaining + 1; admitted+left != rule.Limit { // Peek's Remaining is after the request it answers for
		t.Fatalf("admitted %d, Redis has %d left: %d units lost (%+v)", admitted, left, rule.Limit-admitted-left, s)
	}
}
