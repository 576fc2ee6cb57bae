package rls

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/rls/config"
)

// TestHeapBoundMillionRules: a configuration of a million rules (one
// domain, a value each) loads, holds a bounded heap per rule, and is
// served: its last rule decides as written, and a value it does not name
// finds no rule. It does not run under the race detector, whose own
// allocations make a heap figure meaningless (and the load would take
// minutes); make test and make check run it without -race.
func TestHeapBoundMillionRules(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	const rules = 1_000_000
	var y bytes.Buffer
	y.WriteString("domain: big\ndescriptors:\n")
	for i := range rules {
		fmt.Fprintf(&y, "  - key: client\n    value: c%d\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", i, i%100+1)
	}
	files := []config.File{{Name: "big.yaml", Data: y.Bytes()}}
	y = bytes.Buffer{}
	before := heapAfterGC()
	cfg, err := config.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	files = nil
	s, c := serve(t, cfg, Options{Clock: floodgate.NewManualClock(unixStart)})
	// The server builds a rule's limiter when a request first needs it:
	// the heap holds the configuration and its index.
	held := heapAfterGC() - before
	t.Logf("%d rules: %d MB held, %d bytes a rule", rules, held>>20, held/rules)
	if per := held / rules; per > 512 {
		t.Errorf("%d bytes held a rule, want at most 512", per)
	}
	r := ask(t, c, "big", &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client", Value: fmt.Sprint("c", rules-1)}}})
	if r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != uint32((rules-1)%100+1) || r.Statuses[0].LimitRemaining != uint32((rules-1)%100) {
		t.Fatalf("the last rule: %s", summary(r))
	}
	if r := ask(t, c, "big", &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client", Value: "nobody"}}}); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("a value no rule names: %s", summary(r))
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(cfg)
}

// heapAfterGC is the live heap after a full collection.
func heapAfterGC() int {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int(m.HeapAlloc)
}
