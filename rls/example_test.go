package rls_test

import (
	"context"
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/rls"
)

// A configuration loaded from envoyproxy/ratelimit's YAML, and a Server
// that decides by it: the third request of a client within the minute
// is over the limit, another client's is not.
func Example() {
	cfg, err := rls.LoadOptions{}.Load([]rls.File{{Name: "api.yaml", Data: []byte(`
domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
`)}})
	if err != nil {
		panic(err)
	}
	fmt.Println("domains:", cfg.Domains(), "rules:", cfg.Rules())
	clock := floodgate.NewManualClock(1_700_000_000_000_000_000) // a Unix time, in nanoseconds
	srv, err := rls.New(cfg, rls.Options{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ask := func(addr string) {
		resp, err := srv.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "api",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}}}})
		if err != nil {
			panic(err)
		}
		fmt.Println(addr, resp.OverallCode, "remaining", resp.Statuses[0].LimitRemaining)
	}
	ask("10.0.0.1")
	ask("10.0.0.1")
	ask("10.0.0.1")
	ask("10.0.0.2")
	// Output:
	// domains: 1 rules: 1
	// 10.0.0.1 OK remaining 1
	// 10.0.0.1 OK remaining 0
	// 10.0.0.1 OVER_LIMIT remaining 0
	// 10.0.0.2 OK remaining 1
}
