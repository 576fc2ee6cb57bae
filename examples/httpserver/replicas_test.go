package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/policy"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/redis/go-redis/v9"
)

// The rule of the replica tests: -limit 1000 -period 1h. At 1,000 an
// hour a unit comes back every 3.6 s, so a run of a few seconds refills
// less than one; each test computes the refill of its own run and allows
// exactly its whole part beyond the limit.
const (
	replicaLimit  = 1000
	replicaPeriod = time.Hour
	replicas      = 3
	workers       = 64
	// demand is three times the allowance, so that "exactly the limit
	// admitted" means something.
	demand = 3 * replicaLimit
)

// replicaModes are the two ways a Store decides: a round trip per
// request, and lease mode, with a Max well under the limit, so that a
// replica holds a small part of the allowance at most and the three
// must share it through Redis.
var replicaModes = []struct {
	name string
	args []string
}{
	{"per-request", nil},
	{"lease-max=64", []string{"-lease-max", "64"}},
}

// startReplicas starts replicas servers on the Redis at addr, each with
// -metrics, and the test's rule. -redis-timeout is generous: a noisy
// machine must not hand a request to -redis-failure, which would decide
// it in process (each replica on its own) and make the count prove
// nothing about the Store; scrapeStore checks that none was.
func startReplicas(t *testing.T, addr string, extra []string) []*server {
	t.Helper()
	var ss []*server
	for range replicas {
		args := []string{"-redis", addr, "-redis-timeout", "10s", "-metrics", "127.0.0.1:0",
			"-limit", strconv.Itoa(replicaLimit), "-period", replicaPeriod.String()}
		ss = append(ss, launch(t, append(args, extra...)...))
	}
	return ss
}

// load is what a drive saw, per replica.
type load struct {
	ok, denied, failed [replicas]atomic.Int64
	total              atomic.Int64 // the 200s of all replicas
	key                atomic.Value // the client's key, as the server's /hello names it
}

func (l *load) admitted() int64 { return l.total.Load() }

// drive sends n requests to GET path, round-robin over the replicas,
// from workers goroutines, all from 127.0.0.1 and so one client key.
// after, if not nil, is called once, by the worker whose 200 made the
// admitted count reach at. A replica marked in dead may fail to answer;
// any other answer than 200 or 429, or a failure from a live replica,
// fails the test.
func drive(t *testing.T, ss []*server, path string, n int64, after func(), at int64, dead *[replicas]atomic.Bool) *load {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	var l load
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				r := int(i % replicas)
				resp, err := c.Get(ss[r].url + path)
				if err != nil {
					l.failed[r].Add(1)
					if dead == nil || !dead[r].Load() {
						t.Errorf("replica %d: %v", r, err)
					}
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					l.failed[r].Add(1)
					if dead == nil || !dead[r].Load() {
						t.Errorf("replica %d: reading the answer: %v", r, err)
					}
				case resp.StatusCode == http.StatusOK:
					if path == "/hello" {
						l.key.CompareAndSwap(nil, strings.TrimSpace(strings.TrimPrefix(string(body), "hello, ")))
					}
					l.ok[r].Add(1)
					if l.total.Add(1) == at && after != nil {
						after()
					}
				case resp.StatusCode == http.StatusTooManyRequests:
					l.denied[r].Add(1)
				default:
					l.failed[r].Add(1)
					t.Errorf("replica %d: %d %s", r, resp.StatusCode, body)
				}
			}
		}()
	}
	wg.Wait()
	return &l
}

// peekPolicy is the middleware's /hello policy on the Store, as a Store of
// the test's own sees it: the same Redis, prefix, name, algorithm and
// rule. available returns the units key could still be admitted, without
// charging any.
type peekPolicy struct {
	p     floodgate.StorePolicy
	peek  func(context.Context, string) (floodgate.Decision, error)
	close func()
}

func newPeekPolicy(t *testing.T, addr, route, tier, name string, rule floodgate.Rule) *peekPolicy {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	store, err := redislimit.NewStore(client, redislimit.Config{Timeout: 10 * time.Second, FailureMode: redislimit.FailClosed})
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	// The name under which the middleware put the policy on its Store.
	p, err := store.Policy(policy.StoreName(route, tier, name), "", rule)
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	// A Store's policy is a redislimit.Limiter, whose Peek the
	// floodgate.StorePolicy interface does not name.
	pk, ok := p.(interface {
		Peek(context.Context, string) (floodgate.Decision, error)
	})
	if !ok {
		t.Fatalf("redislimit's StorePolicy %T has no Peek", p)
	}
	pp := &peekPolicy{p: p, peek: pk.Peek, close: func() { p.Close(); client.Close() }}
	t.Cleanup(pp.close)
	return pp
}

func (pp *peekPolicy) available(t *testing.T, key string) int64 {
	t.Helper()
	d, err := pp.peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	if !d.Allowed {
		return 0
	}
	return d.Remaining + 1 // Remaining is after the peeked request
}

// refill is the whole units the rule gives back in elapsed.
func refill(elapsed time.Duration) int64 {
	return int64(elapsed / (replicaPeriod / replicaLimit))
}

// storeCounts is what a replica's Store counted, from its /metrics.
type storeCounts struct {
	roundTrips, fallbacks, leased int64
}

// scrapeStore reads a replica's Store counts from its -metrics.
func scrapeStore(t *testing.T, s *server) storeCounts {
	t.Helper()
	resp, err := http.Get(s.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c storeCounts
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		series, value := line[:cut], line[cut+1:]
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		switch {
		case series == `floodgate_store_round_trips_total{limiter="httpserver-redis"}`:
			c.roundTrips = int64(v)
		case strings.HasPrefix(series, `floodgate_requests_total{limiter="httpserver-redis",`) &&
			strings.Contains(series, `result="fail_`):
			c.fallbacks += int64(v)
		case series == `floodgate_store_leased_units_total{limiter="httpserver-redis"}`:
			c.leased += int64(v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", s.metrics, resp.StatusCode)
	}
	return c
}

// checkStores scrapes every live replica: its -metrics export the
// Store's counts, no request was decided by -redis-failure (each replica
// alone), and in lease mode some units were
// leased, so that the run proved lease mode and not a round trip per
// request. It returns the round trips, summed.
func checkStores(t *testing.T, ss []*server, live func(int) bool, lease bool) int64 {
	t.Helper()
	var trips, leased int64
	for i, s := range ss {
		if !live(i) {
			continue
		}
		c := scrapeStore(t, s)
		if c.roundTrips == 0 {
			t.Errorf("replica %d: no round trip to Redis in its -metrics: the Store's counts are not exported", i)
		}
		if c.fallbacks != 0 {
			t.Errorf("replica %d: %d requests decided by -redis-failure: Redis did not answer in time, and the counts prove nothing", i, c.fallbacks)
		}
		trips += c.roundTrips
		leased += c.leased
	}
	if lease && leased == 0 {
		t.Error("lease mode leased no unit")
	}
	if !lease && leased != 0 {
		t.Errorf("%d units leased without -lease-max", leased)
	}
	return trips
}

func counts(a *[replicas]atomic.Int64) []int64 {
	v := make([]int64, replicas)
	for i := range a {
		v[i] = a[i].Load()
	}
	return v
}

// TestReplicasShareOneLimit: three replicas of the server on one
// redis-server, driven round-robin by 64 workers as one client, admit
// exactly -limit between them (plus the whole units the rule refilled
// during the run), per request and in lease mode. In lease mode the
// client then sends GET /other, a policy of its own, below its limit,
// until the replicas hold units of it leased ahead. Then each replica is
// stopped with SIGTERM, which returns its unspent leases: for each
// policy, what Redis still holds for the client and what was admitted
// add up to the allowance, no unit lost and none over.
func TestReplicasShareOneLimit(t *testing.T) {
	rule := floodgate.Rule{Limit: replicaLimit, Period: replicaPeriod}
	for _, mode := range replicaModes {
		t.Run(mode.name, func(t *testing.T) {
			lease := len(mode.args) > 0
			rdb := redistest.Start(t)
			ss := startReplicas(t, rdb.Addr, mode.args)
			hello := newPeekPolicy(t, rdb.Addr, "GET /hello", "", "hello", rule)
			other := newPeekPolicy(t, rdb.Addr, "GET /other", "", "other", rule)
			begin := time.Now()
			if got := hello.available(t, "127.0.0.1"); got != replicaLimit {
				t.Fatalf("before the run, %d available, want %d", got, replicaLimit)
			}
			l := drive(t, ss, "/hello", demand, nil, 0, nil)
			key, _ := l.key.Load().(string)
			if key == "" {
				t.Fatal("no request was admitted")
			}
			admitted := l.admitted()
			// Admitted during the run: the allowance, and at most what the
			// rule refilled meanwhile.
			extra := refill(time.Since(begin))
			t.Logf("GET /hello, key %q: admitted %v = %d, denied %v, refill allowance %d",
				key, counts(&l.ok), admitted, counts(&l.denied), extra)
			if admitted < replicaLimit || admitted > replicaLimit+extra {
				t.Errorf("%d admitted across the replicas, want %d (up to %d with the refill)", admitted, replicaLimit, replicaLimit+extra)
			}

			// Leases held at the stop, for SIGTERM to return: /other below
			// its limit, in rounds, until Redis has given the replicas more
			// than they spent (a lease goes back by itself once its key
			// has been quiet for its TTL, a second).
			var others, held int64
			for lease && held == 0 && others < replicaLimit-100 {
				lo := drive(t, ss, "/other", 100, nil, 0, nil)
				if got := lo.admitted(); got != 100 {
					t.Fatalf("GET /other, below its limit: %d of 100 admitted", got)
				}
				others += 100
				held = replicaLimit - others - other.available(t, key)
			}
			if lease {
				t.Logf("GET /other: admitted %d, and the replicas held %d units leased ahead", others, held)
				if held <= 0 {
					t.Fatalf("the replicas held %d units of GET /other leased ahead: nothing for SIGTERM to return", held)
				}
			}
			trips := checkStores(t, ss, func(int) bool { return true }, lease)
			t.Logf("%d round trips to Redis for %d requests", trips, demand+others)

			for _, s := range ss {
				s.stop()
			}
			extra = refill(time.Since(begin))
			for _, c := range []struct {
				path     string
				pp       *peekPolicy
				admitted int64
			}{{"/hello", hello, admitted}, {"/other", other, others}} {
				avail := c.pp.available(t, key)
				t.Logf("GET %s after SIGTERM: %d available on Redis; admitted + available = %d", c.path, avail, c.admitted+avail)
				if sum := c.admitted + avail; sum < replicaLimit || sum > replicaLimit+extra {
					t.Errorf("GET %s: admitted %d + available %d = %d, want %d (up to %d with the refill): the replicas lost or created units",
						c.path, c.admitted, avail, sum, replicaLimit, replicaLimit+extra)
				}
			}
		})
	}
}

// TestReplicaKilledNeverOverAdmits: a replica killed with SIGKILL in the
// middle of the run (once a third of the limit is admitted) returns
// nothing, and the two left never admit past the allowance: the 200s of
// all three stay within it, and so do they with what Redis still holds.
// In lease mode the killed replica's unspent units are lost: its clients
// get less, never more.
func TestReplicaKilledNeverOverAdmits(t *testing.T) {
	for _, mode := range replicaModes {
		t.Run(mode.name, func(t *testing.T) {
			rdb := redistest.Start(t)
			ss := startReplicas(t, rdb.Addr, mode.args)
			pp := newPeekPolicy(t, rdb.Addr, "GET /hello", "", "hello", floodgate.Rule{Limit: replicaLimit, Period: replicaPeriod})
			begin := time.Now()
			const victim = 0
			var dead [replicas]atomic.Bool
			kill := func() {
				dead[victim].Store(true)
				if err := ss[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Errorf("SIGKILL: %v", err)
				}
			}
			l := drive(t, ss, "/hello", demand, kill, replicaLimit/3, &dead)
			if !dead[victim].Load() {
				t.Fatal("the run ended before the kill")
			}
			ss[victim].done = true
			if err := ss[victim].cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("the killed replica exited with %v", err)
			}
			key, _ := l.key.Load().(string)
			checkStores(t, ss, func(i int) bool { return i != victim }, len(mode.args) > 0)
			for i, s := range ss {
				if i != victim {
					s.stop()
				}
			}
			admitted, avail := l.admitted(), pp.available(t, key)
			extra := refill(time.Since(begin))
			lost := replicaLimit + extra - admitted - avail
			t.Logf("admitted %v = %d, denied %v, failed %v (replica %d killed); %d available on Redis; at most %d lost with the killed replica",
				counts(&l.ok), admitted, counts(&l.denied), counts(&l.failed), victim, avail, lost)
			if admitted > replicaLimit+extra {
				t.Errorf("%d admitted across the replicas, over the allowance %d", admitted, replicaLimit+extra)
			}
			if admitted+avail > replicaLimit+extra {
				t.Errorf("admitted %d + available %d = %d, over the allowance %d", admitted, avail, admitted+avail, replicaLimit+extra)
			}
			for i := range ss {
				if i != victim && l.failed[i].Load() != 0 {
					t.Errorf("replica %d, alive, failed %d requests", i, l.failed[i].Load())
				}
			}
		})
	}
}

// taken is what key has taken of pp's rule of limit: limit less what is
// available, or, while it owes, limit and what it owes.
func (pp *peekPolicy) taken(t *testing.T, key string, limit int64) int64 {
	t.Helper()
	d, err := pp.peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	if !d.Allowed {
		return limit + d.Owed
	}
	return limit - d.Remaining - 1 // Remaining is after the peeked request
}

// TestReplicasSpendOneBudget: three replicas with -budget 5000 on one
// redis-server, driven round-robin by 64 workers as one client, each
// request a GET /spend of its own cost (1 to 100, known when its reply
// ends), per request and in lease mode. Every request is checked against
// the budget when it arrives and charged when it ends, so the client runs
// past the budget by what its last replies cost (those in flight when it
// ran out), and is then refused by every replica.
// Once the replicas have stopped (returning their leases), Redis holds
// exactly the costs of the replies served, every unit of the debt
// included (less what the rule refilled during the run); in lease mode
// too, but for what the rule refilled of the slots the leases gave back.
func TestReplicasSpendOneBudget(t *testing.T) {
	const budget, requests = 5000, 400
	rule := floodgate.Rule{Limit: budget, Period: replicaPeriod}
	for _, mode := range replicaModes {
		t.Run(mode.name, func(t *testing.T) {
			rdb := redistest.Start(t)
			ss := startReplicas(t, rdb.Addr, append([]string{"-budget", strconv.Itoa(budget)}, mode.args...))
			pp := newPeekPolicy(t, rdb.Addr, "GET /spend", "", "budget", rule)
			begin := time.Now()
			tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: time.Minute}
			var served, refused, spent atomic.Int64
			var next atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= requests {
							return
						}
						cost := 1 + i*37%100
						resp, err := c.Get(ss[i%replicas].url + "/spend?n=" + strconv.FormatInt(cost, 10))
						if err != nil {
							t.Error(err)
							return
						}
						body, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						switch {
						case err != nil:
							t.Error(err)
						case resp.StatusCode == http.StatusOK && strings.HasSuffix(string(body), "spent "+strconv.FormatInt(cost, 10)+"\n"):
							served.Add(1)
							spent.Add(cost)
						case resp.StatusCode == http.StatusTooManyRequests:
							refused.Add(1)
						default:
							t.Errorf("%d %q", resp.StatusCode, body)
						}
					}
				}()
			}
			wg.Wait()
			checkStores(t, ss, func(int) bool { return true }, len(mode.args) > 0)
			// A connection the transport dialled and never used is new to
			// the server, which waits 5 s for it at Shutdown: close them.
			tr.CloseIdleConnections()
			for _, s := range ss {
				s.stop()
			}
			extra := int64(time.Since(begin)*budget/replicaPeriod) + 1 // the whole units refilled, and one begun
			got := pp.taken(t, "127.0.0.1", budget)
			t.Logf("%d served costing %d, %d refused; Redis holds %d taken (refill allowance %d)", served.Load(), spent.Load(), refused.Load(), got, extra)
			lease := len(mode.args) > 0
			if refused.Load() == 0 || !lease && spent.Load() <= budget {
				t.Errorf("served %d units and refused %d requests: the run never ran past the budget", spent.Load(), refused.Load())
			}
			// Past the budget by no more than the requests in flight when
			// it ran out (each checked while the client owed nothing) and
			// what the leases held then: a client that owes is refused by
			// every replica.
			if over := spent.Load() - budget; over > workers*100+replicas*64 {
				t.Errorf("served %d units past the budget, more than %d requests in flight and the leases could", over, workers)
			}
			// Exactly the costs served, per request: no cost is lost or
			// counted twice. In lease mode the units the leases did not
			// spend go back (those given back after another replica
			// charged the key pay its debt), but a bucket takes back only
			// the whole units whose slots are still ahead of its clock:
			// those whose time the rule refilled during the run, extra at
			// most over all the give-backs, may stay charged (under
			// qemu's arm64 emulation, 1 of 6,277 in one run).
			upper := spent.Load()
			if len(mode.args) > 0 {
				upper += extra
			}
			if got > upper || got < spent.Load()-extra {
				t.Errorf("Redis holds %d taken, the replicas served %d (up to %d less with the refill, %d more in lease mode): a cost was lost or counted twice", got, spent.Load(), extra, upper-spent.Load())
			}
		})
	}
}
