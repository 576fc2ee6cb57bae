package rls

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/heaptest"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/redislimit"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
	files := []File{{Name: "big.yaml", Data: y.Bytes()}}
	y = bytes.Buffer{}
	before := int(heaptest.Live())
	cfg, err := LoadOptions{}.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	files = nil
	s, c := serve(t, cfg, Options{Clock: floodgate.NewManualClock(unixStart)})
	// The server builds a rule's limiter when a request first needs it:
	// the heap holds the configuration and its index.
	held := int(heaptest.Live()) - before
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

// TestHeapBoundIdleRulesOnRedis: 10,000 rules on a Store on Redis in
// lease mode, each used once (a check, which makes its policy and holds
// no key), cost the Server no goroutine beyond the Store's and at most
// 2 KiB of heap each: a rule is its policy's rule and scripts, and its
// counts. Without the race detector, as the others here.
func TestHeapBoundIdleRulesOnRedis(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	srv := redistest.Start(t)
	const rules = 10_000
	var y bytes.Buffer
	y.WriteString("domain: idle\ndescriptors:\n")
	for i := range rules {
		fmt.Fprintf(&y, "  - key: rule\n    value: r%d\n    rate_limit: {unit: second, requests_per_unit: 1000}\n", i)
	}
	cfg, err := LoadOptions{}.Load([]File{{Name: "idle.yaml", Data: y.Bytes()}})
	if err != nil {
		t.Fatal(err)
	}
	st := store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: "idle", FailureMode: redislimit.FailClosed, Lease: redislimit.Lease{Max: 1000}})
	goroutines := runtime.NumGoroutine()
	before := int(heaptest.Live())
	s, c := serve(t, cfg, Options{Store: st})
	served := runtime.NumGoroutine() // the gRPC server's own
	for i := range rules {
		d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "rule", Value: fmt.Sprint("r", i)}},
			HitsAddend: &wrapperspb.UInt64Value{Value: 0}}
		if r := ask(t, c, "idle", d); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1000 {
			t.Fatalf("rule %d: %s", i, summary(r))
		}
	}
	held := int(heaptest.Live()) - before
	if g := runtime.NumGoroutine(); g > served+16 {
		t.Fatalf("%d goroutines with %d rules in use, %d before (%d without the Server)", g, rules, served, goroutines)
	}
	per := held / rules
	t.Logf("%d rules used once, then idle: %d bytes of heap each; %d goroutines, %d before", rules, per, runtime.NumGoroutine(), served)
	if per > 2048 {
		t.Errorf("an idle rule holds %d bytes, above 2 KiB", per)
	}
	runtime.KeepAlive(s)
}
