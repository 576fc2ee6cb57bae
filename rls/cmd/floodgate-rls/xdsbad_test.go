package main

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// TestXDSBadInput: the service keeps serving its last good configuration,
// healthy, while the server pushes a million rules (100,000 under the
// race detector, whose go-control-plane takes tens of seconds to marshal
// a million): more than a configuration may hold
// (FLOODGATE_CONFIG_MAX_RULES, 10,000 here), NACKed, naming it; and
// while it pushes a configuration that cannot load every 10 ms; a good
// push is then in force at once, and the heap holds none of what was
// refused.
func TestXDSBadInput(t *testing.T) {
	ads := startADS(t, "127.0.0.1:0")
	a, logs := start(t, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr,
		"CONFIG_GRPC_XDS_NODE_ID": "n", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "50ms", "FLOODGATE_CONFIG_MAX_RULES": "10000"})
	c := grpcClient(t, a.grpc)
	ads.push(t, "n", "1", xdsConfig(1_000_000))
	waitFor(t, "the first push ACKed", ads.answered(false, "1"))
	served := func(when string) {
		t.Helper()
		if code, _ := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK {
			t.Fatalf("%s: %v", when, code)
		}
		resp, err := c.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "api", Descriptors: xdsDescriptor("k", "w")})
		if err != nil || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1_000_000 {
			t.Fatalf("%s: %v, %v; want the first push's rule", when, resp, err)
		}
		if !healthy(t, a)() {
			t.Fatalf("%s: unhealthy", when)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()

	// A million rules: some 19 MB, which would keep some 330 MB.
	rules := 1_000_000
	if raceDetector {
		rules = 100_000
	}
	million := &rlsconf.RateLimitConfig{Name: "api", Domain: "api"}
	for i := range rules {
		million.Descriptors = append(million.Descriptors, &rlsconf.RateLimitDescriptor{Key: "k", Value: fmt.Sprint(i),
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}})
	}
	ads.push(t, "n", "2", million)
	million = nil
	waitFor(t, "the million rules NACKed, naming the bound", func() bool {
		return strings.Contains(strings.Join(ads.nackMessages(), "\n"), "FLOODGATE_CONFIG_MAX_RULES")
	})
	served("while the server pushes a million rules")

	// A push that cannot load, every 10 ms, each another.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			bad := xdsConfig(uint32(i + 1))
			bad.Descriptors = append(bad.Descriptors, bad.Descriptors[0])
			ads.push(t, "n", fmt.Sprint("bad-", i), bad)
		}
	}()
	waitFor(t, "a bad push NACKed", func() bool { return strings.Contains(strings.Join(ads.nackMessages(), "\n"), "appears twice") })
	for i := range 50 {
		served(fmt.Sprint("call ", i, " while bad pushes come every 10 ms"))
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	nacks := len(ads.nackMessages())

	ads.push(t, "n", "good", xdsConfig(7))
	waitFor(t, "the good push ACKed", ads.answered(false, "good"))
	if code, left := xdsCall(t, c, "fresh"); code != pb.RateLimitResponse_OK || left != 6 {
		t.Fatalf("after the good push: %v, %d left; want 6", code, left)
	}
	// The test's own ADS server may still be sending the million rules on
	// a stream the client broke (slowly, under emulation): the heap must
	// come back within seconds, and stay up only if the service kept
	// what it refused.
	after := heap()
	for deadline := time.Now().Add(20 * time.Second); !raceDetector && after > before+16<<20 && time.Now().Before(deadline); after = heap() {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d NACKs; heap %d MB before the bad pushes, %d MB after", nacks, before>>20, after>>20)
	if !raceDetector && after > before+16<<20 {
		t.Errorf("the heap grew from %d to %d MB: what was refused is still held", before>>20, after>>20)
	}
	if n := strings.Count(logs.String(), "configuration not loaded"); n > nacks+1 {
		t.Errorf("%d refusals logged for %d NACKs", n, nacks)
	}
}

// xdsDescriptor is one descriptor of a single entry.
func xdsDescriptor(k, v string) []*rlv3.RateLimitDescriptor {
	return []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}}
}
