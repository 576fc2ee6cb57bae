package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestSentinel: REDIS_TYPE=SENTINEL with REDIS_URL as envoyproxy/ratelimit
// writes it (the master's name, then the Sentinels). The limits are
// kept on the master the Sentinel names; when the master is killed, the
// Sentinel promotes its replica, and the service decides on it again
// within seconds (refusing meanwhile, under FLOODGATE_FAILURE_MODE
// closed), with what the replica held of the key.
func TestSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	root := runtimeDir(t, map[string]string{"api.yaml": "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"})
	a, logs := start(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "REDIS_TYPE": "sentinel",
		"REDIS_URL": s.MasterName + "," + s.Sentinel.Addr, "FLOODGATE_FAILURE_MODE": "closed", "FLOODGATE_REDIS_TIMEOUT": "300ms"})
	c := grpcClient(t, a.grpc)
	for i := range 10 {
		if code, left := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK || left != uint32(99-i) {
			t.Fatalf("call %d on the master: %v, %d left", i, code, left)
		}
	}
	if !strings.Contains(logs.String(), "sentinel_master="+s.MasterName) {
		t.Errorf("the log does not name the master:\n%s", logs)
	}
	// What the replica holds once it has the master's writes.
	waitFor(t, "the replica's copy of the key", func() bool {
		n, err := redistest.Do(s.Replica.Addr, "DBSIZE")
		return err == nil && n != int64(0)
	})

	s.Master.Kill()
	killed := time.Now()
	waitFor(t, "a decision on the promoted replica", func() bool {
		code, _ := xdsCall(t, c, "w")
		return code == pb.RateLimitResponse_OK
	})
	t.Logf("decided again %v after the master was killed", time.Since(killed).Round(10*time.Millisecond))
	if addr, err := s.MasterAddr(); err != nil || addr != s.Replica.Addr {
		t.Fatalf("the Sentinel's master is %q (%v), want the replica %s", addr, err, s.Replica.Addr)
	}
	// The key came over with the replica: it goes on from its count.
	if code, left := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK || left != 89 {
		t.Fatalf("the key on the promoted replica: %v, %d left; want OK, 89", code, left)
	}
}

// TestSentinelSettings: REDIS_TYPE=SENTINEL needs the master's name and a
// Sentinel; REDIS_SENTINEL_AUTH is the Sentinels' user and password.
func TestSentinelSettings(t *testing.T) {
	for _, url := range []string{"mymaster", "mymaster,", ""} {
		env := map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": url}
		if url == "" {
			continue // no REDIS_URL: the limits are in process
		}
		if _, err := readSettings(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
			t.Errorf("REDIS_URL=%q: %v", url, err)
		}
	}
	s, err := readSettings(func(k string) string {
		return map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster, s1:26379,s2:26379", "REDIS_AUTH": "pw",
			"REDIS_SENTINEL_AUTH": "admin:spw"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	r := s.redis
	if !r.sentinel || r.master != "mymaster" || len(r.addrs) != 2 || r.addrs[0] != "s1:26379" || r.password != "pw" || r.sentinelUser != "admin" || r.sentinelPassword != "spw" {
		t.Errorf("settings: %+v", r)
	}
}

// TestSentinelReplicas: three replicas of the service on a master, its
// replica and three Sentinels (a quorum of two) share one key exactly
// through a failover. The master is killed as soon as 120 requests are
// admitted, before it need have sent them all to its replica: what it
// had not sent is what the failover loses, and the test counts it, from
// what the promoted replica holds. After the failover the replicas
// admit exactly what the promoted key has left, so that the only
// requests admitted past the limit are the ones the failover lost.
func TestSentinelReplicas(t *testing.T) {
	s := redistest.StartSentinels(t, 3)
	const limit = 300
	root := runtimeDir(t, map[string]string{"api.yaml": fmt.Sprintf("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", limit)})
	url := s.MasterName
	for _, sen := range s.Sentinels {
		url += "," + sen.Addr
	}
	var clients []pb.RateLimitServiceClient
	for range 3 {
		a, _ := start(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "REDIS_TYPE": "sentinel", "REDIS_URL": url,
			"FLOODGATE_FAILURE_MODE": "closed", "FLOODGATE_REDIS_TIMEOUT": "300ms"})
		clients = append(clients, grpcClient(t, a.grpc))
	}
	// call asks for hits of the key: 0 is a check, which charges nothing
	// (a descriptor's own hits_addend of 0, as Envoy sends it).
	call := func(c pb.RateLimitServiceClient, hits uint64) (pb.RateLimitResponse_Code, uint32, error) {
		d := xdsDescriptor("k", "shared")
		d[0].HitsAddend = wrapperspb.UInt64(hits)
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "api", Descriptors: d})
		if err != nil {
			return 0, 0, err
		}
		return resp.OverallCode, resp.Statuses[0].LimitRemaining, nil
	}
	// drive sends n requests from 12 workers, spread over the replicas,
	// and returns how many were admitted.
	drive := func(n int) int {
		var admitted, next atomic.Int64
		var wg sync.WaitGroup
		for w := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					code, _, err := call(clients[w%3], 1)
					if err != nil {
						t.Error(err)
						return
					}
					if code == pb.RateLimitResponse_OK {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return int(admitted.Load())
	}
	if got := drive(120); got != 120 {
		t.Fatalf("%d of 120 admitted before the failover, under a limit of %d", got, limit)
	}
	s.Master.Kill()
	killed := time.Now()
	// A check (hits 0) charges nothing: each replica decides on the
	// promoted replica again, and says what the key has left there.
	var left uint32
	for i, c := range clients {
		waitFor(t, fmt.Sprint("replica ", i, " deciding on the promoted replica"), func() bool {
			code, l, err := call(c, 0)
			left = l
			// While Redis cannot answer, a check is answered with nothing
			// left; the promoted key holds at most 120 of 300.
			return err == nil && code == pb.RateLimitResponse_OK && l > 0
		})
	}
	held := limit - int(left)
	lost := 120 - held
	t.Logf("decided again %v after the master was killed; the failover lost %d of the 120 counts", time.Since(killed).Round(10*time.Millisecond), lost)
	if lost < 0 || lost > 120 {
		t.Fatalf("the promoted key counts %d, though 120 were admitted", held)
	}
	if got := drive(2 * limit); got != int(left) {
		t.Fatalf("%d admitted after the failover, want exactly the %d the promoted key had left", got, left)
	}
	if addr, err := s.MasterAddr(); err != nil || addr != s.Replica.Addr {
		t.Fatalf("the Sentinels' master is %q (%v), want the replica %s", addr, err, s.Replica.Addr)
	}
}
