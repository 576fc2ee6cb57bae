package redislimit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestOutageOneBreaker: 100 policies on one Store, Redis killed. The
// breaker is the Store's: it opens after BreakAfter failed calls in all,
// whatever policies they were of, and then no policy calls Redis until a
// probe.
func TestOutageOneBreaker(t *testing.T) {
	srv := redistest.Start(t)
	clock := floodgate.NewManualClock(0)
	s := mustStore(t, srv, Config{Timeout: time.Second, FailureMode: FailClosed, BreakAfter: 3, ProbeEvery: time.Minute, Clock: clock})
	ps := make([]floodgate.StorePolicy, 100)
	for i := range ps {
		ps[i] = mustPolicy(t, s, fmt.Sprint("p", i), floodgate.FixedWindow, floodgate.Rule{Limit: 10, Period: time.Hour})
	}
	ctx := context.Background()
	for _, p := range ps { // every policy's script works
		if _, j, err := s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil); err != nil || j != -1 {
			t.Fatalf("before the outage: %d, %v", j, err)
		}
	}
	srv.Kill()
	before := s.Stats()
	for i, p := range ps {
		d, j, err := s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil)
		if err != nil || j != 0 || d.Allowed {
			t.Fatalf("policy %d during the outage: %+v, %d, %v; want FailClosed's refusal", i, d, j, err)
		}
	}
	st := s.Stats()
	if errs := st.Errors - before.Errors; errs != 3 || st.Opens != 1 || st.Fallbacks-before.Fallbacks != 100 {
		t.Fatalf("100 policies' requests made %d failed calls, %d opens, %d fallbacks; want 3 calls, 1 open, 100 fallbacks",
			errs, st.Opens, st.Fallbacks-before.Fallbacks)
	}
	t.Logf("the breaker opened after %d failed calls of 100 policies", st.Errors-before.Errors)
}

// TestAbandonedKeepNoCharge: requests with deadlines from 1 µs to 1 ms,
// mixed with requests that have none, on a Store's two policies, through
// the batches: each admitted request is charged, and none refused on its
// context keeps a charge once the refunds are in, so that Redis holds
// exactly the rule less the admissions. A bucket's refund of a unit that
// is not the last of its TAT is a credit, which keeps at most the
// fraction of the unit whose step has begun: there Redis holds no more
// than a unit per refund beyond the admissions, and never less.
func TestAbandonedKeepNoCharge(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range []string{floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingCounter} {
		t.Run(alg, func(t *testing.T) {
			// Far from reach, and slow: what is left counts every charge (a
			// bucket's step is 3.6 s, which the test's second never
			// refills).
			const limit = 1_000_000
			rule := floodgate.Rule{Limit: limit, Period: time.Hour}
			if alg == floodgate.TokenBucket {
				rule.Period = 1000 * time.Hour
			}
			s := mustStore(t, srv, Config{Timeout: 10 * time.Second, FailureMode: FailClosed, Prefix: "abandon-" + alg})
			a := mustPolicy(t, s, "a", alg, rule)
			b := mustPolicy(t, s, "b", alg, rule)
			var admitted, abandoned atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 9))
					for range 32 {
						asks := []floodgate.Ask{{Policy: a, Key: "k", N: 1}}
						if rng.IntN(2) == 0 {
							asks = append(asks, floodgate.Ask{Policy: b, Key: "k", N: 1})
						}
						c, cancel := ctx, context.CancelFunc(func() {})
						if rng.IntN(3) != 0 {
							c, cancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(1000))*time.Microsecond)
						}
						d, _, err := s.Decide(c, asks, nil)
						cancel()
						switch {
						case err != nil:
							abandoned.Add(1)
						case d.Allowed:
							admitted.Add(int64(len(asks)))
						default:
							t.Errorf("refused without an error: %+v", d)
						}
					}
				}()
			}
			wg.Wait()
			if err := s.Close(); err != nil { // waits for the refunds
				t.Fatal(err)
			}
			held := int64(0)
			for _, p := range []floodgate.StorePolicy{a, b} {
				d, err := p.Peek(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				held += limit - (d.Remaining + 1)
			}
			st := s.Stats()
			kept := int64(0) // what a bucket's credits may keep
			if alg == floodgate.TokenBucket {
				kept = st.Refunded
			}
			if held < admitted.Load() || held > admitted.Load()+kept || abandoned.Load() == 0 {
				t.Fatalf("Redis holds %d charged, %d asks admitted; %d requests abandoned, %d units refunded: %+v",
					held, admitted.Load(), abandoned.Load(), st.Refunded, st)
			}
			t.Logf("%d asks admitted, %d requests abandoned (%d units charged by Redis before their callers left, given back)",
				admitted.Load(), abandoned.Load(), st.Refunded)
		})
	}
}

// TestRepeatedAsksOnRedis: asks that name one policy and key twice are
// one ask of their summed cost, whatever the FailureMode: with 5 left, 3
// and 3 are refused whole and charge nothing; 2 and 3 pass together and
// charge 5. So do Decide's asks of one key by the same policy twice.
func TestRepeatedAsksOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, mode := range []FailureMode{FailOpen, FailClosed, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			s := mustStore(t, srv, Config{Timeout: 10 * time.Second, FailureMode: mode, Prefix: "repeat-" + mode.String()})
			p := mustPolicy(t, s, "p", floodgate.FixedWindow, floodgate.Rule{Limit: 5, Period: time.Hour})
			q := mustPolicy(t, s, "q", floodgate.TokenBucket, floodgate.Rule{Limit: 100, Period: time.Hour})
			left := func() int64 {
				d, err := p.Peek(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					return 0
				}
				return d.Remaining + 1
			}
			each := make([]floodgate.Decision, 3)
			d, j, err := s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: 3}, {Policy: q, Key: "k", N: 1}, {Policy: p, Key: "k", N: 3}}, each)
			if err != nil || d.Allowed || j != 0 || each[0] != each[2] || left() != 5 {
				t.Fatalf("3 and 3 of 5: %+v, refused %d, %v, each %+v; %d left", d, j, err, each, left())
			}
			if s.Stats().Fallbacks != 0 || s.Stats().Errors != 0 {
				t.Fatalf("the script failed: %+v", s.Stats())
			}
			d, j, err = s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "k", N: 2}, {Policy: q, Key: "k", N: 1}, {Policy: p, Key: "k", N: 3}}, each)
			if err != nil || !d.Allowed || j != -1 || left() != 0 {
				t.Fatalf("2 and 3 of 5: %+v, refused %d, %v; %d left, want 0", d, j, err, left())
			}
			// A route that names one policy twice, on a fresh key.
			d, j, err = s.Decide(ctx, asksOf("r", 3, []floodgate.StorePolicy{p, p}, nil), nil)
			if err != nil || d.Allowed || j != 0 {
				t.Fatalf("3 and 3 of one key: %+v, %d, %v", d, j, err)
			}
			if d, _ := p.Peek(ctx, "r"); d.Remaining != 4 {
				t.Fatalf("the refused request charged r: %+v", d)
			}
		})
	}
}

// TestLeaseSuspendedHost: a replica's monotonic clock stops while its host
// is suspended, and Redis's clock runs on: after a suspension its
// batches are spent no more, and its next request asks Redis, which
// holds what the suspension gave back.
func TestLeaseSuspendedHost(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := context.Background()
	for _, alg := range redisAlgorithms {
		mono := floodgate.NewManualClock(epoch) // stops while suspended
		wall := floodgate.NewManualClock(epoch) // runs on, as Redis's clock does
		rule := floodgate.Rule{Limit: 10, Period: time.Second}
		l := replicaWall(t, c, Config{Algorithm: alg, Rule: rule, Prefix: "suspend", FailureMode: FailClosed,
			Lease: Lease{Max: 8, TTL: time.Hour}}, mono, mono, wall)
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v, %v", alg, d, err)
		}
		if spendable(l, "k") == 0 {
			t.Fatalf("%s: no batch leased", alg)
		}
		wall.Advance(time.Minute) // suspended a minute: the monotonic clock did not move
		if got := spendable(l, "k"); got != 0 {
			t.Fatalf("%s: %d units spendable after a suspension", alg, got)
		}
		calls := l.Stats().Calls
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if l.Stats().Calls == calls {
			t.Fatalf("%s: the first request after the suspension was served from the old batch", alg)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeaseKeepsNoKeys holds lease mode's memory to its keys' hashes: 300
// distinct keys of a megabyte each, each asked twice in lease mode, leave
// the heap holding nothing of them once the requests are done.
func TestLeaseKeepsNoKeysMemory(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	srv := redistest.Start(t)
	c := client(t, srv)
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 100, Period: time.Hour}, Prefix: "bigkeys", Timeout: 10 * time.Second,
		FailureMode: FailClosed, Lease: Lease{Max: 10, TTL: time.Hour}}) // no lease ends while the test runs
	const keys, size = 300, 1 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keys {
		key := strings.Repeat(string(rune('a'+i%26)), size-8) + fmt.Sprintf("%08d", i)
		for range 2 {
			if d, err := l.Allow(context.Background(), key); err != nil || !d.Allowed {
				t.Fatalf("key %d: %+v, %v", i, d, err)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := l.s.lease.size.Load(); n != keys {
		t.Fatalf("%d keys hold leases, want %d", n, keys)
	}
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if held > 16<<20 {
		t.Fatalf("lease mode holds %d MiB after %d keys of 1 MiB: it keeps the keys", held>>20, keys)
	}
	t.Logf("%d keys of 1 MiB in lease mode: %.1f MiB held", keys, float64(held)/(1<<20))
}

// TestBatchHandedWithinTimeout: with Redis stalled, calls queued behind
// the batches in flight are handed the next batch by a leader; each call,
// queued and sent, ends within its own Timeout from when it was made,
// never two.
func TestBatchHandedWithinTimeout(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	l := mustNew(t, client(t, srv), Config{Rule: floodgate.Rule{Limit: 100, Period: time.Hour}, Timeout: timeout,
		FailureMode: FailClosed, BreakAfter: 1000})
	if _, err := l.Allow(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	var wg sync.WaitGroup
	var worst atomic.Int64
	call := func() {
		defer wg.Done()
		start := time.Now()
		if _, err := l.Allow(context.Background(), "k"); err != nil {
			t.Error(err)
		}
		for took := int64(time.Since(start)); ; {
			w := worst.Load()
			if took <= w || worst.CompareAndSwap(w, took) {
				break
			}
		}
	}
	for range 2 { // the batches in flight
		wg.Add(1)
		go call()
	}
	waitUntil(t, "two batches in flight", 10*time.Second, func() bool { _, in := batchState(&l.s.batch); return in == 2 })
	time.Sleep(timeout / 2) // the queued calls start later, and must not end a whole Timeout after the first batch's end
	for range 6 {
		wg.Add(1)
		go call()
	}
	wg.Wait()
	if w := time.Duration(worst.Load()); w > timeout+budgetSlack {
		t.Fatalf("a call took %v, Timeout %v", w, timeout)
	}
}

// callerValue is a context key the tests' go-redis hook reads.
type callerValue struct{}

// valueHook records the callerValue of every command's and pipeline's
// context that go-redis's hooks see.
type valueHook struct {
	mu   sync.Mutex
	seen []any
}

func (h *valueHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *valueHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(ctx)
		return next(ctx, cmd)
	}
}

func (h *valueHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(ctx)
		return next(ctx, cmds)
	}
}

func (h *valueHook) record(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, ctx.Value(callerValue{}))
}

// TestBatchCarriesCallerValues: a call's round trip runs with its
// caller's context values (a trace span reaches go-redis's hooks), on
// both of its paths: the caller's own goroutine, and a leader's.
func TestBatchCarriesCallerValues(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	h := &valueHook{}
	c.AddHook(h)
	l := mustNew(t, c, Config{Rule: floodgate.Rule{Limit: 100, Period: time.Hour}, Timeout: 10 * time.Second})
	base := context.WithValue(context.Background(), callerValue{}, "span")
	cancelable, cancel := context.WithCancel(base)
	defer cancel()
	for _, ctx := range []context.Context{base, cancelable} {
		h.mu.Lock()
		h.seen = nil
		h.mu.Unlock()
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		h.mu.Lock()
		seen := h.seen
		h.mu.Unlock()
		if len(seen) == 0 || seen[len(seen)-1] != "span" {
			t.Fatalf("the round trip's context carried %v, want the caller's value", seen)
		}
	}
}

// TestSetRuleReadsTIMEOnce: SetRule of many policies in a row, as a
// reload of a service's rules makes, asks Redis's clock once, not once a
// rule.
func TestSetRuleReadsTIMEOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	s := mustStore(t, srv, Config{Timeout: 10 * time.Second})
	var ps []floodgate.StorePolicy
	for i := range 200 {
		ps = append(ps, mustPolicy(t, s, fmt.Sprint("p", i), floodgate.FixedWindow, floodgate.Rule{Limit: 10, Period: time.Hour}))
	}
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := p.SetRule(floodgate.Rule{Limit: 5, Period: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_time:calls="); ok {
			fmt.Sscanf(rest, "%d", &calls)
		}
	}
	if calls != 1 {
		t.Fatalf("200 rules changed with %d TIME calls, want 1", calls)
	}
}

// TestIdlePoliciesHeapBound: 10,000 policies on one Store in lease mode,
// each asked once, then idle: the Store runs one goroutine whatever their
// number, the bookkeeper returns and forgets every key once it is idle,
// and each idle policy holds at most 2 KiB of heap.
func TestIdlePoliciesHeapBound(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	srv := redistest.Start(t)
	c := client(t, srv)
	clock := floodgate.NewManualClock(epoch)
	set, err := readConfig(c, Config{Prefix: "idle", Timeout: 10 * time.Second, FailureMode: FailOpen, Lease: Lease{Max: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := newStore(c, set, false, func(s *Store) {
		s.redisClock = clock
		s.margin = int64(1000 * time.Hour / time.Millisecond)
	})
	defer s.Close()
	const rules = 10_000
	ps := make([]floodgate.StorePolicy, rules)
	ctx := context.Background()
	for i := range ps {
		p, err := s.Policy(fmt.Sprint("rule ", i), floodgate.FixedWindow, floodgate.Rule{Limit: 1000, Period: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
		if _, j, err := s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: "client", N: 1}}, nil); err != nil || j != -1 {
			t.Fatalf("policy %d: %d, %v", i, j, err)
		}
	}
	if n := s.lease.size.Load(); n != rules {
		t.Fatalf("%d keys hold leases, want %d", n, rules)
	}
	if g := runtime.NumGoroutine(); g > goroutines+16 {
		t.Fatalf("%d goroutines with %d policies in use, %d before the Store", g, rules, goroutines)
	}
	// Idle: a TTL for the batches to go back, another for the keys to be
	// forgotten.
	for range 2 {
		clock.Advance(time.Second + time.Millisecond)
		s.lease.sweep(clock.Now())
	}
	if n := s.lease.size.Load(); n != 0 {
		t.Fatalf("%d keys still held after two TTLs idle", n)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / rules
	if per > 2048 {
		t.Fatalf("an idle policy holds %d bytes, above 2 KiB", per)
	}
	if g := runtime.NumGoroutine(); g > goroutines+16 {
		t.Fatalf("%d goroutines idle, %d before the Store", g, goroutines)
	}
	st := s.Stats()
	if st.Returned == 0 {
		t.Fatalf("nothing went back: %+v", st)
	}
	runtime.KeepAlive(ps)
	t.Logf("%d idle policies: %d bytes of heap each, %d goroutines (%d before); %d units leased, %d returned",
		rules, per, runtime.NumGoroutine(), goroutines, st.Leased, st.Returned)
}

// TestDecideLeasesInItsRoundTrip: in lease mode, a request of several
// policies whose leases cannot answer takes a batch for each of them in
// its own round trip, when it charges: once it returns, each holds one,
// and the next request is decided from them, Redis stalled or not. A
// refused request charges nothing.
func TestDecideLeasesInItsRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	// Leases of an hour: with a second's, the bucket's first batch (half
	// a TTL of its 36 ms steps) lasts under half a second, and a loaded
	// machine may take longer than that to reach the second request.
	s := mustStore(t, srv, Config{FailureMode: FailClosed, BreakAfter: 1000, Lease: Lease{Max: 1000, TTL: time.Hour}})
	rule := floodgate.Rule{Limit: 100_000, Period: time.Hour}
	a := mustPolicy(t, s, "a", floodgate.FixedWindow, rule).(*policy)
	b := mustPolicy(t, s, "b", floodgate.SlidingCounter, rule).(*policy)
	c := mustPolicy(t, s, "c", floodgate.TokenBucket, rule).(*policy)
	ctx := context.Background()
	asks := []floodgate.Ask{{Policy: a, Key: "x", N: 1}, {Policy: b, Key: "y", N: 1}, {Policy: c, Key: "z", N: 1}}
	calls := s.Stats().Calls
	if _, j, err := s.Decide(ctx, asks, nil); err != nil || j != -1 {
		t.Fatal(j, err)
	}
	if got := s.Stats().Calls - calls; got != 1 {
		t.Fatalf("the first request made %d round trips, want 1", got)
	}
	for _, ask := range asks {
		p := ask.Policy.(*policy)
		if st := p.state(ask.Key); st == nil || st.g.Load() == nil {
			t.Fatalf("%s holds no lease once the first request returned", p.name)
		}
	}
	srv.Pause()
	d, j, err := s.Decide(ctx, asks, nil)
	srv.Resume()
	if err != nil || j != -1 || !d.Allowed {
		t.Fatalf("the second request, Redis stalled: %+v, %d, %v; want it admitted from the leases", d, j, err)
	}
	// A request that an enforced policy refuses charges nothing: what
	// Redis counts for a's key is what a's leases hold of it, unspent. The
	// bookkeeper may take a batch ahead for the key meanwhile, so the two
	// are read while no round trip of a's is in flight, and again if one
	// was (a Peek, which takes a batch itself, could race that one).
	tight := mustPolicy(t, s, "tight", floodgate.FixedWindow, floodgate.Rule{Limit: 1, Period: time.Hour}).(*policy)
	if _, j, err := s.Decide(ctx, []floodgate.Ask{{Policy: tight, Key: "w", N: 1}}, nil); err != nil || j != -1 {
		t.Fatalf("the tight policy's one: refused by %d, %v", j, err)
	}
	if _, j, err := s.Decide(ctx, []floodgate.Ask{{Policy: a, Key: "w", N: 1}, {Policy: tight, Key: "w", N: 1}}, nil); err != nil || j != 1 {
		t.Fatalf("past the tight policy's limit: refused by %d, %v", j, err)
	}
	rdb := client(t, srv)
	for end := time.Now().Add(time.Minute); ; {
		f1 := a.flights.Load()
		h1 := heldUnits(&Limiter{p: a}, "w")
		c := windowCount(t, rdb, a.redisKey("w"))
		f2 := a.flights.Load()
		h2 := heldUnits(&Limiter{p: a}, "w")
		if f1 != 0 || f2 != 0 || h1 != h2 {
			if time.Now().After(end) {
				t.Fatal("a's round trips never ceased")
			}
			runtime.Gosched() // the bookkeeper's round trip is on its way
			continue
		}
		if c != h1 {
			t.Fatalf("the refused request charged a: Redis counts %d, a's leases hold %d", c, h1)
		}
		break
	}
}

// windowCount is what a window's key in Redis counts in its current
// window (window.lua's curr), 0 when the key is absent.
func windowCount(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Bytes()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil || len(v) != 40 {
		t.Fatalf("%s: %q, %v", key, v, err)
	}
	return int64(binary.LittleEndian.Uint64(v[8:16]))
}
