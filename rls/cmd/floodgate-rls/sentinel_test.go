package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
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
