package rls

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/redislimit"
)

// BenchmarkSetConfig is the time to put a configuration of 10,000 rules
// in force, every rule in use and every limit changed, as each push of
// Envoy Gateway's does: in process, and on Redis.
func BenchmarkSetConfig(b *testing.B) {
	const rules = 10_000
	cfgs := make([]*Config, 2)
	for v := range cfgs {
		var y strings.Builder
		y.WriteString("domain: eg\ndescriptors:\n")
		for i := range rules {
			fmt.Fprintf(&y, "  - {key: route, value: r%d, descriptors: [{key: rule, rate_limit: {unit: minute, requests_per_unit: %d}}]}\n", i, 1000+i+v)
		}
		c, err := LoadOptions{}.Load([]File{{Name: "eg.yaml", Data: []byte(y.String())}})
		if err != nil {
			b.Fatal(err)
		}
		cfgs[v] = c
	}
	stores := map[string]func(b *testing.B) Options{
		"local": func(*testing.B) Options { return Options{} },
		"redis": func(b *testing.B) Options {
			srv := redistest.Start(b)
			return Options{Store: store(b, redisClient(b, srv.Addr), redislimit.Config{Prefix: "setconfig"})}
		},
	}
	for _, name := range []string{"local", "redis"} {
		b.Run("store="+name, func(b *testing.B) {
			if name == "redis" {
				if _, err := redistest.Find(); err != nil {
					b.Skip(err)
				}
			}
			s, err := New(cfgs[0], stores[name](b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			for i := range rules { // every rule in use
				req := &pb.RateLimitRequest{Domain: "eg", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
					{Key: "route", Value: fmt.Sprint("r", i)}, {Key: "rule"}}}}}
				if _, err := s.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			v := 0
			for b.Loop() {
				v++
				if err := s.SetConfig(context.Background(), cfgs[v%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
