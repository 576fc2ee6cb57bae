package rls

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/floodgate-go/floodgate/rls/internal/peertest"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// store makes a Store for a Server on c, with the Server's HashTag.
func store(t testing.TB, c redis.UniversalClient, cfg redislimit.Config) *redislimit.Store {
	t.Helper()
	cfg.HashTag = HashTag
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second // every decision from Redis, on a busy machine
	}
	s, err := redislimit.NewStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // after the Server's, before the client's
	return s
}

func redisClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisMatchesInProcess: on Redis, a Server answers every request
// as the in-process Server answers it: the same codes, remainders and
// resets, for random requests of one to three descriptors, with costs,
// checks, shadows, unlimited and zero rules, on the same config.
func TestRedisMatchesInProcess(t *testing.T) {
	srv := redistest.Start(t)
	cfg := mustConfig(t, basic)
	for round := range 10 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			_, onRedis := serve(t, cfg, Options{Store: store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: fmt.Sprint("match", round, time.Now().UnixNano()), FailureMode: redislimit.FailClosed})})
			_, inProcess := serve(t, cfg, Options{})
			r := rand.New(rand.NewPCG(uint64(round), 7))
			keys := []string{"k", "big", "small", "shadow", "free", "none", "gold", "everyone", "nothing"}
			for i := range 150 {
				var reqs [2]*pb.RateLimitRequest
				req := &pb.RateLimitRequest{Domain: "d", HitsAddend: uint32(r.IntN(3))}
				for range 1 + r.IntN(3) {
					d := desc(keys[r.IntN(len(keys))], fmt.Sprint(r.IntN(2)))
					if r.IntN(5) == 0 {
						d.HitsAddend = wrapperspb.UInt64(uint64(r.IntN(3)))
					}
					req.Descriptors = append(req.Descriptors, d)
				}
				reqs[0], reqs[1] = req, req
				start := time.Now().Unix()
				a, err1 := onRedis.ShouldRateLimit(context.Background(), reqs[0])
				b, err2 := inProcess.ShouldRateLimit(context.Background(), reqs[1])
				if err1 != nil || err2 != nil {
					t.Fatalf("request %d: %v, %v", i, err1, err2)
				}
				if time.Now().Unix() != start {
					continue // a window of a second may have ended between the two
				}
				if testing.Verbose() {
					t.Logf("%d %v\n  %s\n  %s", i, req.Descriptors, peertest.Answer(a), peertest.Answer(b))
				}
				if sa, sb := peertest.Answer(a), peertest.Answer(b); sa != sb {
					t.Fatalf("request %d %v:\n  on Redis   %s\n  in process %s", i, req.Descriptors, sa, sb)
				}
			}
		})
	}
}

// TestRedisReplicas: three Servers, each with its own client and Store,
// on one redis-server, are raced by 64 gRPC callers with requests of one
// hot descriptor and of pairs with another: for every algorithm, exactly
// the hot rule's limit passes, and the other descriptor holds exactly
// the pairs admitted. In lease mode, what was admitted plus what Redis
// holds once the Servers are closed is the allowance.
func TestRedisReplicas(t *testing.T) {
	srv := redistest.Start(t)
	rounds := 12
	if testmain.Quick() {
		rounds = 6
	}
	for _, alg := range []string{floodgate.FixedWindow, floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.SlidingCounter, floodgate.SlidingLog} {
		for _, lease := range []int64{0, 16} {
			t.Run(fmt.Sprintf("%s/lease=%d", alg, lease), func(t *testing.T) {
				// A year: nothing refills in the run. Redis holds a sliding
				// counter's Limit × Period within 2^52 µs: an hour.
				unit := "year"
				if alg == floodgate.SlidingCounter {
					unit = "hour"
				}
				yaml := fmt.Sprintf("domain: d\ndescriptors:\n  - key: hot\n    rate_limit: {unit: %s, requests_per_unit: 200, algorithm: %s}\n  - key: side\n    rate_limit: {unit: year, requests_per_unit: 5000}\n", unit, alg)
				cfg := mustConfig(t, yaml)
				prefix := fmt.Sprint("replicas-", alg, "-", lease, "-", time.Now().UnixNano())
				var clients []pb.RateLimitServiceClient
				var servers []*Server
				for range 3 {
					s, c := serve(t, cfg, Options{Store: store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: prefix, FailureMode: redislimit.FailClosed, Lease: redislimit.Lease{Max: lease}}), StopIncrementOverLimit: true})
					clients, servers = append(clients, c), append(servers, s)
				}
				var hot, pairs atomic.Int64
				var wg sync.WaitGroup
				for g := range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						c := clients[g%3]
						for i := range rounds {
							if (g+i)%2 == 0 {
								if admits(t, c, "d", desc("hot", "x")) {
									hot.Add(1)
								}
							} else if admits(t, c, "d", desc("side", "y"), desc("hot", "x")) {
								pairs.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				admitted := hot.Load() + pairs.Load()
				if lease == 0 && admitted != 200 {
					t.Fatalf("hot admitted %d across three replicas, want exactly 200", admitted)
				}
				if admitted > 200 {
					t.Fatalf("hot admitted %d across three replicas, above 200", admitted)
				}
				for _, s := range servers {
					s.Close()
				}
				// A fresh Server looks at what Redis holds.
				_, c := serve(t, cfg, Options{Store: store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: prefix, FailureMode: redislimit.FailClosed}), StopIncrementOverLimit: true})
				check := func(kv ...string) int64 {
					d := desc(kv...)
					d.HitsAddend = wrapperspb.UInt64(0)
					r := ask(t, c, "d", d)
					return int64(r.Statuses[0].LimitRemaining)
				}
				if left := check("hot", "x"); admitted+left != 200 {
					t.Fatalf("admitted %d and Redis holds %d: %d, want the allowance of 200", admitted, left, admitted+left)
				}
				if left := check("side", "y"); pairs.Load()+left != 5000 {
					t.Fatalf("side: %d pairs admitted and %d left, want 5000 in all: a refused pair kept its charge", pairs.Load(), left)
				}
			})
		}
	}
}

// TestRedisCluster: two Servers on a real Redis Cluster, with the
// Server's HashTag, race on pairs of descriptors whose own keys hash to
// different slots: exactly the limit passes, every pair in one script.
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	cfg := mustConfig(t, "domain: d\ndescriptors:\n  - key: hot\n    rate_limit: {unit: year, requests_per_unit: 100, algorithm: token_bucket}\n  - key: side\n    rate_limit: {unit: year, requests_per_unit: 1000}\n")
	prefix := fmt.Sprint("cluster-", time.Now().UnixNano())
	var clients []pb.RateLimitServiceClient
	for range 2 {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		_, rc := serve(t, cfg, Options{Store: store(t, c, redislimit.Config{Prefix: prefix, FailureMode: redislimit.FailClosed})})
		clients = append(clients, rc)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				if admits(t, clients[g%2], "d", desc("side", fmt.Sprint(i%4)), desc("hot", "x")) {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Fatalf("admitted %d on the cluster, want exactly 100", got)
	}
}

// TestRedisFailure: while Redis is away, a Server answers by its Store's
// FailureMode (FailOpen: OK); a caller's deadline that passes first is
// answered DeadlineExceeded and opens no breaker.
func TestRedisFailure(t *testing.T) {
	srv := redistest.Start(t)
	cfg := mustConfig(t, basic)
	st := store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: "failure", FailureMode: redislimit.FailOpen, Timeout: 200 * time.Millisecond})
	_, c := serve(t, cfg, Options{Store: st})
	for range 2 {
		ask(t, c, "d", desc("small", "f"))
	}
	if r := ask(t, c, "d", desc("small", "f")); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the third of 2 with Redis up: %v", r)
	}
	// A caller's deadline shorter than Redis's answer.
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("small", "f"), desc("big", "f")}})
	cancel()
	if code := status.Code(err); code != codes.DeadlineExceeded {
		t.Fatalf("a caller's deadline: %v, want DeadlineExceeded", err)
	}
	for _, smp := range st.AppendCounts(nil) {
		if (smp.Metric == counts.StoreBreakerOpens || smp.Metric == counts.StoreBreakerOpen) && smp.Value != 0 {
			t.Fatalf("a caller's deadline opened the breaker: %+v", smp)
		}
	}
	// Redis away past Timeout: FailOpen admits.
	r := ask(t, c, "d", desc("small", "f"), desc("big", "f"))
	if r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("Redis away, FailOpen: %v", r)
	}
	srv.Resume()
	if r := ask(t, c, "d", desc("small", "f")); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("Redis back: %v, want the count it kept", r)
	}
}

// TestRedisFailClosedCheck: while Redis is away, FailClosed refuses a
// check (a descriptor's hits_addend of 0, as Envoy AI Gateway sends before
// a stream) as it refuses a hit: a token budget is not open while its
// state cannot be read. Without leases and with them (where a key whose
// lease this replica holds is checked by the lease, Redis or not, so the
// checks are of a key it holds none of); a key at its limit passes a
// check while Redis is up, as envoyproxy/ratelimit answers one.
func TestRedisFailClosedCheck(t *testing.T) {
	srv := redistest.Start(t)
	cfg := mustConfig(t, basic)
	for _, lease := range []int64{0, 100} {
		st := store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: fmt.Sprint("fail-closed-check-", lease), FailureMode: redislimit.FailClosed,
			Timeout: 200 * time.Millisecond, Lease: redislimit.Lease{Max: lease}})
		_, c := serve(t, cfg, Options{Store: st})
		check := func(v string) *rlv3.RateLimitDescriptor {
			d := desc("small", v)
			d.HitsAddend = wrapperspb.UInt64(0)
			return d
		}
		for range 2 {
			ask(t, c, "d", desc("small", "f"))
		}
		if r := ask(t, c, "d", check("f")); r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("lease %d: a check of a key at its limit, Redis up: %v, want OK", lease, r)
		}
		srv.Pause()
		ds := []*rlv3.RateLimitDescriptor{check("h"), desc("small", "g"), check("h")}
		if lease == 0 {
			ds = append(ds, check("f"))
		}
		for _, d := range ds {
			if r := ask(t, c, "d", d); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("lease %d: Redis away, FailClosed, %v: %v, want OVER_LIMIT", lease, d, r)
			}
		}
		srv.Resume()
	}
}

// TestRedisReload: on Redis, a config changed mid-run keeps each key's
// state through the policies' SetRule: a limit lowered while 16 callers
// race never lets a key pass more than it could have before, and a rule
// kept as it was keeps its count.
func TestRedisReload(t *testing.T) {
	srv := redistest.Start(t)
	cfg := func(n int) *Config {
		return mustConfig(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: %d, algorithm: token_bucket}\n  - key: same\n    rate_limit: {unit: year, requests_per_unit: 10}\n", n))
	}
	s, c := serve(t, cfg(100), Options{Store: store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: fmt.Sprint("reload-", time.Now().UnixNano()), FailureMode: redislimit.FailClosed})})
	for range 4 {
		ask(t, c, "d", desc("same", "x"))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	run := func(n int) {
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n / 16 {
					if admits(t, c, "d", desc("k", "x")) {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	run(80)
	wg.Wait()
	run(160)
	if err := s.SetConfig(context.Background(), cfg(30)); err != nil { // mid-run: the key holds 20 or less, under the new 30
		t.Fatal(err)
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Fatalf("admitted %d across the change, want 100: what the key held, and no more", got)
	}
	if r := ask(t, c, "d", desc("same", "x")); r.Statuses[0].LimitRemaining != 5 {
		t.Fatalf("the unchanged rule: %d left, want 5: the reload lost its count", r.Statuses[0].LimitRemaining)
	}
}

// TestRedisLeaseDefaultSetting: in lease mode, under envoyproxy/ratelimit's
// default setting (every hit charged, StopIncrementOverLimit false), a
// request within the limit is decided as with the setting true, from the
// leases, which it takes in its own round trips: 100 clients of five
// requests each (hits of 1, and Envoy AI Gateway's checks and costs) make
// at most three round trips a client, with the setting or without: the
// first request's, which takes a batch of 1; that batch's renewal; and
// the third request's, if the renewal had not come yet (then its batch
// serves the rest). A charge that cannot be refused takes no lease: every
// hit charged alone would make four or more. (Leases live for an hour, in
// a window of a year: no batch runs out of time, and none goes back,
// however slowly the run goes.) A request past the limit is still charged
// into debt, and the key refuses after it.
func TestRedisLeaseDefaultSetting(t *testing.T) {
	srv := redistest.Start(t)
	const clients = 100
	cfg := mustConfig(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 100000}\n")
	trips := func(stop bool) int64 {
		st := store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: fmt.Sprint("lease-default-", stop), FailureMode: redislimit.FailClosed,
			Lease: redislimit.Lease{Max: 1000, TTL: time.Hour}})
		_, c := serve(t, cfg, Options{Store: st, StopIncrementOverLimit: stop})
		before := st.Stats()
		for i := range clients {
			for _, n := range []uint64{1, 1, 1, 0, 7} {
				d := desc("k", fmt.Sprint("client-", i))
				d.HitsAddend = wrapperspb.UInt64(n)
				if r := ask(t, c, "d", d); r.OverallCode != pb.RateLimitResponse_OK {
					t.Fatalf("client %d, hits %d, within the limit: %v", i, n, r.OverallCode)
				}
			}
		}
		after := st.Stats()
		// A script sent whole (the first call on a fresh Redis) may take a
		// round trip more.
		made := after.Calls - before.Calls - (after.Loads - before.Loads)
		t.Logf("StopIncrementOverLimit %v: %d round trips: %d refills, %d batches renewed ahead, %d units returned",
			stop, made, after.Refills-before.Refills, after.Renewals-before.Renewals, after.Returned-before.Returned)
		if made > 3*clients {
			t.Errorf("StopIncrementOverLimit %v: %d clients within the limit made %d round trips, more than 3 each: hits were charged alone", stop, clients, made)
		}
		if !stop {
			d := desc("k", "client-0")
			d.HitsAddend = wrapperspb.UInt64(200_000)
			if r := ask(t, c, "d", d); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("a cost past the limit: %v, want OVER_LIMIT", r.OverallCode)
			}
			d.HitsAddend = wrapperspb.UInt64(0)
			if r := ask(t, c, "d", d); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("a check after the debt: %v, want OVER_LIMIT", r.OverallCode)
			}
		}
		return made
	}
	exact, every := trips(true), trips(false)
	t.Logf("%d requests within the limit: %d round trips with StopIncrementOverLimit, %d without", 5*clients, exact, every)
}
