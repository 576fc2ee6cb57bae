// Package grpcreplicas proves grpclimit's interceptors on a shared
// redislimit.Store: three gRPC servers, each with its own Store and
// Limiter as separate replicas would have, on one redis-server.
package grpcreplicas

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
	fgpolicy "github.com/floodgate-go/floodgate/internal/policy"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

const (
	limit    = 1000
	period   = time.Hour
	replicas = 3
	workers  = 64
	demand   = 3 * limit // three times the allowance
	check    = "/grpc.health.v1.Health/Check"
	list     = "/grpc.health.v1.Health/List"
)

// rule is every policy's; each method has a policy of its own, named
// for it.
var (
	rule   = floodgate.Rule{Limit: limit, Period: period}
	policy = map[string]string{check: "check", list: "list"}
)

// replica is one gRPC server with its own Redis client, Store and
// interceptors, on a loopback port.
type replica struct {
	addr   string
	srv    *grpc.Server
	lim    *grpclimit.Limiter
	store  *redislimit.Store
	client *redis.Client
	served chan error
}

func startReplica(t *testing.T, redisAddr string, lease int64) *replica {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	// A generous Timeout: a noisy machine must not hand a call to the
	// FailureMode, which decides in process; FailClosed would then refuse
	// it, so that a late Redis can make the count fall short, never pass.
	store, err := redislimit.NewStore(client, redislimit.Config{Timeout: 10 * time.Second,
		FailureMode: redislimit.FailClosed, Lease: redislimit.Lease{Max: lease}})
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	lim, err := grpclimit.New(grpclimit.Config{
		Methods: map[string][]grpclimit.Policy{check: {{Name: policy[check], Rule: rule}}, list: {{Name: policy[list], Rule: rule}}},
		Store:   store,
	})
	if err != nil {
		store.Close()
		client.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lim.Close()
		store.Close()
		client.Close()
		t.Fatal(err)
	}
	r := &replica{addr: ln.Addr().String(), lim: lim, store: store, client: client, served: make(chan error, 1),
		srv: grpc.NewServer(grpc.UnaryInterceptor(lim.UnaryServerInterceptor()))}
	healthpb.RegisterHealthServer(r.srv, health.NewServer())
	go func() { r.served <- r.srv.Serve(ln) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop shuts the replica down as a server should: GracefulStop (the calls
// in flight finish), then the interceptors' Close, which returns the units
// leased ahead, then the Store's, which stops its bookkeeper, then the
// Redis client. It is idempotent.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if r.srv == nil {
		return
	}
	r.srv.GracefulStop()
	if err := <-r.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if err := r.lim.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := r.store.Close(); err != nil {
		t.Errorf("store Close: %v", err)
	}
	if err := r.client.Close(); err != nil {
		t.Errorf("redis client Close: %v", err)
	}
	r.srv = nil
}

// available is what Redis still holds for key under the interceptors'
// policy of method, as a Store of the test's own (no leases) peeks it:
// the units the key could still be admitted.
func available(t *testing.T, redisAddr, method, key string) int64 {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redislimit.NewStore(client, redislimit.Config{Timeout: 10 * time.Second, FailureMode: redislimit.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// The name under which grpclimit put the policy on its Store.
	p, err := store.Policy(fgpolicy.StoreName(method, "", policy[method]), "", rule)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A Store's policy is a redislimit.Limiter, whose Peek the
	// floodgate.StorePolicy interface does not name.
	pk, ok := p.(interface {
		Peek(context.Context, string) (floodgate.Decision, error)
	})
	if !ok {
		t.Fatalf("redislimit's StorePolicy %T has no Peek", p)
	}
	d, err := pk.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	if !d.Allowed {
		return 0
	}
	return d.Remaining + 1 // Remaining is after the peeked request
}

// drive makes n calls, round-robin over conns, from workers goroutines:
// method is check or list. It returns the calls admitted
// and refused by each replica; any other answer fails the test.
func drive(t *testing.T, conns []healthpb.HealthClient, n int64, method string) (ok, denied [replicas]int64) {
	t.Helper()
	var oks, denieds [replicas]atomic.Int64
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
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var err error
				if method == check {
					_, err = conns[r].Check(ctx, &healthpb.HealthCheckRequest{})
				} else {
					_, err = conns[r].List(ctx, &healthpb.HealthListRequest{})
				}
				cancel()
				switch status.Code(err) {
				case codes.OK:
					oks[r].Add(1)
				case codes.ResourceExhausted:
					denieds[r].Add(1)
				default:
					t.Errorf("replica %d: %v", r, err)
				}
			}
		}()
	}
	wg.Wait()
	for i := range ok {
		ok[i], denied[i] = oks[i].Load(), denieds[i].Load()
	}
	return ok, denied
}

func sum(v [replicas]int64) int64 {
	var n int64
	for _, x := range v {
		n += x
	}
	return n
}

// TestReplicasShareOneLimit: three gRPC servers on one redis-server, each
// with grpclimit on a redislimit.Store of its own, called round-robin by
// 64 goroutines as one client (127.0.0.1), admit exactly the limit of
// Health/Check between them (plus the whole units the rule refilled
// during the run) per request, and never more in lease mode, where a
// batch a replica may be given back too late to be taken; every other
// call is ResourceExhausted. In lease mode the client then calls Health/List, a
// policy of its own, below its limit, until the replicas hold units of it
// leased ahead. Once each server has stopped gracefully and closed its
// interceptors, which returns those units, for each policy what Redis
// holds for the client and what was admitted add up to the allowance.
func TestReplicasShareOneLimit(t *testing.T) {
	for _, mode := range []struct {
		name  string
		lease int64
	}{{"per-request", 0}, {"lease-max=64", 64}} {
		t.Run(mode.name, func(t *testing.T) {
			rdb := redistest.Start(t)
			var rs []*replica
			var conns []healthpb.HealthClient
			for range replicas {
				r := startReplica(t, rdb.Addr, mode.lease)
				cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cc.Close() })
				rs = append(rs, r)
				conns = append(conns, healthpb.NewHealthClient(cc))
			}
			const key = "127.0.0.1" // the peer address every call comes from
			step := period / limit
			begin := time.Now()
			if got := available(t, rdb.Addr, check, key); got != limit {
				t.Fatalf("before the run, %d available, want %d", got, limit)
			}
			ok, denied := drive(t, conns, demand, check)
			admitted := sum(ok)
			extra := int64(time.Since(begin) / step)
			t.Logf("Check: admitted %v = %d of %d calls, denied %v, refill allowance %d", ok, admitted, demand, denied, extra)
			// Per request, every unit is taken. In lease mode a replica
			// caches a denial for up to a lease's TTL (what Redis lacked is
			// in other replicas' leases, spent or given back within it), so
			// units a replica gives back at the end of the run may find
			// every other one still refusing from its cache: at most a
			// batch a replica is left untaken, and the count after the
			// stop below finds it on Redis.
			floor := limit - replicas*mode.lease
			if admitted < floor || admitted > limit+extra {
				t.Errorf("%d admitted across the replicas, want %d (at least %d in lease mode, up to %d with the refill)", admitted, limit, floor, limit+extra)
			}

			// Leases held at the stop, for Close to return: List below its
			// limit, in rounds, until Redis has given the replicas more than
			// they spent (a lease goes back by itself once its key has been
			// quiet for its TTL, a second).
			var lists, held int64
			for mode.lease > 0 && held == 0 && lists < limit-100 {
				if ok, _ := drive(t, conns, 100, list); sum(ok) != 100 {
					t.Fatalf("List, below its limit: %d of 100 admitted", sum(ok))
				}
				lists += 100
				held = limit - lists - available(t, rdb.Addr, list, key)
			}
			if mode.lease > 0 {
				t.Logf("List: admitted %d, and the replicas held %d units leased ahead", lists, held)
				if held <= 0 {
					t.Fatalf("the replicas held %d units of List leased ahead: nothing for Close to return", held)
				}
			}

			for _, r := range rs {
				r.stop(t)
			}
			extra = int64(time.Since(begin) / step)
			for _, c := range []struct {
				method   string
				admitted int64
			}{{check, admitted}, {list, lists}} {
				avail := available(t, rdb.Addr, c.method, key)
				t.Logf("%s after the stop: %d available on Redis; admitted + available = %d", c.method, avail, c.admitted+avail)
				if sum := c.admitted + avail; sum < limit || sum > limit+extra {
					t.Errorf("%s: admitted %d + available %d = %d, want %d (up to %d with the refill): the replicas lost or created units",
						c.method, c.admitted, avail, sum, limit, limit+extra)
				}
			}
		})
	}
}
