package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/floodgate-go/floodgate/rls"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// xdsAny is rc as a push's resource.
func xdsAny(t *testing.T, rc *rlsconf.RateLimitConfig) *anypb.Any {
	t.Helper()
	b, err := proto.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: resourcev3.RateLimitConfigType, Value: b}
}

// TestXDSLoadCost: what a push costs to load is a small multiple of its
// bytes, whatever its shape, and about what the configuration keeps; a
// refused one costs next to nothing. The push's bytes are read as they
// are, never decoded into messages, and a push too large is refused
// before any of its tree is made.
func TestXDSLoadCost(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	rules := &rlsconf.RateLimitConfig{Name: "eg", Domain: "envoy-gateway/default/eg/http"}
	for i := 0; i < 10_000; i++ {
		v := fmt.Sprintf("httproute/default/backend/rule/0/match/0/route-%d", i)
		rules.Descriptors = append(rules.Descriptors, &rlsconf.RateLimitDescriptor{Key: v, Value: v,
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "rule-0-match-0",
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: uint32(10 + i)}}}})
	}
	deep := &rlsconf.RateLimitConfig{Name: "deep", Domain: "d"}
	level := &deep.Descriptors
	for i := 0; i < 1500; i++ {
		d := &rlsconf.RateLimitDescriptor{Key: strings.Repeat("k", 1000), RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}}
		*level = []*rlsconf.RateLimitDescriptor{d}
		level = &d.Descriptors
	}
	million := &rlsconf.RateLimitConfig{Name: "million", Domain: "d"}
	for i := 0; i < 1_000_000; i++ {
		million.Descriptors = append(million.Descriptors, &rlsconf.RateLimitDescriptor{Key: "k", Value: fmt.Sprint(i),
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}})
	}
	// 30 million empty descriptors: two bytes each.
	empty := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("d"))
	empty = append(empty, bytes.Repeat([]byte{0x1a, 0x00}, 30<<20)...)
	// 12 million descriptors of a one-byte key: five bytes each.
	oneByte := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("d"))
	oneByte = append(oneByte, bytes.Repeat([]byte{0x1a, 0x03, 0x0a, 0x01, 'k'}, 12<<20)...)
	for _, tc := range []struct {
		name     string
		o        rls.LoadOptions
		r        *anypb.Any
		err      string
		alloc    float64 // all that the load allocates, as a multiple of the push's bytes
		live     float64 // what stays live
		minRules int
	}{
		{"10,000 rules", rls.LoadOptions{}, xdsAny(t, rules), "", 8, 8, 10_000},
		{"1,500 levels of 1 KB keys", rls.LoadOptions{}, xdsAny(t, deep), "nested deeper than", 0.1, 0.1, 0},
		{"a million rules over a bound of 16 MiB", rls.LoadOptions{MaxBytes: 16 << 20}, xdsAny(t, million), "FLOODGATE_CONFIG_MAX_BYTES", 0.1, 0.1, 0},
		{"30 million empty descriptors", rls.LoadOptions{}, &anypb.Any{TypeUrl: resourcev3.RateLimitConfigType, Value: empty}, "a descriptor has an empty key", 0.1, 0.01, 0},
		{"30 million descriptors of one byte", rls.LoadOptions{MaxBytes: 16 << 20}, &anypb.Any{TypeUrl: resourcev3.RateLimitConfigType, Value: oneByte}, "FLOODGATE_CONFIG_MAX_BYTES", 0.1, 0.01, 0},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c, err := loadXDS(context.Background(), tc.o, []xdsResource{{tc.r.TypeUrl, tc.r.Value}})
		runtime.ReadMemStats(&after)
		alloc := float64(after.TotalAlloc - before.TotalAlloc)
		runtime.GC()
		runtime.ReadMemStats(&after)
		live := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
		n := float64(len(tc.r.Value))
		t.Logf("%s: %.0f bytes, allocated %.2fx, live %.2fx, %v", tc.name, n, alloc/n, live/n, err)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && c.Rules() < tc.minRules:
			t.Errorf("%s: %d rules, want %d", tc.name, c.Rules(), tc.minRules)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
		}
		if alloc > tc.alloc*n {
			t.Errorf("%s: allocated %.2f times its bytes, more than %v", tc.name, alloc/n, tc.alloc)
		}
		if live > tc.live*n {
			t.Errorf("%s: holds %.2f times its bytes, more than %v", tc.name, live/n, tc.live)
		}
		runtime.KeepAlive(c)
	}
}

// BenchmarkLoadXDS is the time to load a push of 10,000 rules, as
// Envoy Gateway writes them.
func BenchmarkLoadXDS(b *testing.B) {
	rules := &rlsconf.RateLimitConfig{Name: "eg", Domain: "envoy-gateway/default/eg/http"}
	for i := 0; i < 10_000; i++ {
		v := fmt.Sprintf("httproute/default/backend/rule/0/match/0/route-%d", i)
		rules.Descriptors = append(rules.Descriptors, &rlsconf.RateLimitDescriptor{Key: v, Value: v,
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "rule-0-match-0",
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: uint32(10 + i)}}}})
	}
	msg, err := proto.Marshal(rules)
	if err != nil {
		b.Fatal(err)
	}
	r := []xdsResource{{resourcev3.RateLimitConfigType, msg}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := loadXDS(context.Background(), rls.LoadOptions{}, r); err != nil {
			b.Fatal(err)
		}
	}
}
