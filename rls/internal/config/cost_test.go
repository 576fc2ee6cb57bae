package config

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// push marshals rc as a push's resource.
func push(t testing.TB, rc *rlsconf.RateLimitConfig) []byte {
	t.Helper()
	b, err := proto.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rule is a rate_limit of n a second.
func rule(n uint32) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: n}
}

// costShapes are pushes of every shape a Config keeps: one level of n
// rules; Envoy Gateway's (a route and its rule below it, long names);
// one descriptor with n rules below it; leaves without a rule; rules
// with names and replaces; wildcards; a chain of 32 levels, a rule at
// each.
func costShapes(t testing.TB, n int) map[string][]byte {
	flat := &rlsconf.RateLimitConfig{Name: "flat", Domain: "api"}
	eg := &rlsconf.RateLimitConfig{Name: "eg", Domain: "envoy-gateway/default/eg/http"}
	wide := &rlsconf.RateLimitConfig{Name: "wide", Domain: "api", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "client"}}}
	leaves := &rlsconf.RateLimitConfig{Name: "leaves", Domain: "api"}
	named := &rlsconf.RateLimitConfig{Name: "named", Domain: "api"}
	wild := &rlsconf.RateLimitConfig{Name: "wild", Domain: "api"}
	for i := range n {
		v := fmt.Sprint(i)
		flat.Descriptors = append(flat.Descriptors, &rlsconf.RateLimitDescriptor{Key: "k", Value: v, RateLimit: rule(1)})
		route := fmt.Sprintf("httproute/default/backend-%d/rule/0/match/0/www_example_com", i)
		eg.Descriptors = append(eg.Descriptors, &rlsconf.RateLimitDescriptor{Key: route, Value: route,
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "rule-0-match-0", Value: "rule-0-match-0", RateLimit: rule(uint32(10 + i))}}})
		wide.Descriptors[0].Descriptors = append(wide.Descriptors[0].Descriptors, &rlsconf.RateLimitDescriptor{Key: "id", Value: v, RateLimit: rule(2)})
		leaves.Descriptors = append(leaves.Descriptors, &rlsconf.RateLimitDescriptor{Key: "leaf-" + v})
		p := rule(3)
		p.Name = "rule-" + v
		p.Replaces = []*rlsconf.RateLimitReplace{{Name: "other-" + v}, {Name: "another-" + v}}
		named.Descriptors = append(named.Descriptors, &rlsconf.RateLimitDescriptor{Key: "k", Value: v, RateLimit: p})
		wild.Descriptors = append(wild.Descriptors, &rlsconf.RateLimitDescriptor{Key: "path", Value: "/api/" + v + "/*/items/*", RateLimit: rule(4)})
	}
	chain := &rlsconf.RateLimitConfig{Name: "chain", Domain: "d"}
	for c := range n / 32 {
		top := &rlsconf.RateLimitDescriptor{Key: "c", Value: fmt.Sprint(c), RateLimit: rule(1)}
		chain.Descriptors = append(chain.Descriptors, top)
		for level := 1; level < 32; level++ {
			d := &rlsconf.RateLimitDescriptor{Key: fmt.Sprint("level-", level), RateLimit: rule(1)}
			top.Descriptors = []*rlsconf.RateLimitDescriptor{d}
			top = d
		}
	}
	out := map[string][]byte{}
	for _, rc := range []*rlsconf.RateLimitConfig{flat, eg, wide, leaves, named, wild, chain} {
		out[rc.Name] = push(t, rc)
	}
	return out
}

// estimate is what the first reading of LoadXDS estimates a push keeps.
func estimate(t *testing.T, msg []byte) int {
	t.Helper()
	r := xdsReader{max: DefaultMaxBytes, maxDepth: DefaultMaxDepth, ctx: context.Background()}
	if _, _, _, err := r.config(msg); err != nil {
		t.Fatal(err)
	}
	return r.cost
}

// TestLoadCostEstimate: what LoadXDS's first reading estimates a push
// will keep (MaxMemory's measure) is within a quarter of what its Config
// keeps, for every shape; and what loading it takes, the push's bytes
// included, is less than what it keeps, so that the heap never holds
// twice what the Config keeps while it loads. It does not run under the
// race detector, whose own allocations make a heap figure meaningless.
func TestLoadCostEstimate(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	for name, msg := range costShapes(t, 50_000) {
		est := estimate(t, msg)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c, err := Options{}.LoadXDS([][]byte{msg})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		allocated := float64(after.TotalAlloc - before.TotalAlloc)
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
		runtime.KeepAlive(c)
		t.Logf("%s: %d rules, %d bytes: kept %.0f (%.0f a rule), estimated %.2fx; allocated %.2fx what it keeps, and its bytes %.2fx",
			name, c.Len(), len(msg), kept, kept/float64(max(c.Len(), 1)), float64(est)/kept, allocated/kept, float64(len(msg))/kept)
		if r := float64(est) / kept; r < 0.75 || r > 1.33 {
			t.Errorf("%s: estimated %d bytes, %.2f times the %.0f it keeps: want within a quarter", name, est, r, kept)
		}
		if extra := allocated + float64(len(msg)) - kept; extra > kept {
			t.Errorf("%s: the load allocated %.0f bytes and holds the push's %d, for a Config of %.0f: more than twice it in all", name, allocated, len(msg), kept)
		}
	}
}

// TestXDSBounds: a push over MaxRules, MaxMemory or MaxDepth is refused
// by the first reading, with the bound's error, having made nothing;
// one at the bound loads. A push whose bytes are far more than what it
// keeps (a field given again and again) is refused. A load whose
// context ends stops with the context's cause. Files are held to
// MaxRules and MaxMemory too.
func TestXDSBounds(t *testing.T) {
	shapes := costShapes(t, 1000)
	eg := shapes["eg"]
	est := estimate(t, eg)
	deep := &rlsconf.RateLimitConfig{Name: "deep", Domain: "d"}
	level := &deep.Descriptors
	for i := range 40 {
		d := &rlsconf.RateLimitDescriptor{Key: fmt.Sprint("k", i), RateLimit: rule(1)}
		*level = []*rlsconf.RateLimitDescriptor{d}
		level = &d.Descriptors
	}
	// A descriptor whose key is given a thousand times, 10 KB each.
	again := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("d"))
	var desc []byte
	for range 1000 {
		desc = protowire.AppendBytes(protowire.AppendTag(desc, 1, protowire.BytesType), []byte(strings.Repeat("k", 10_000)))
	}
	again = protowire.AppendBytes(protowire.AppendTag(again, 3, protowire.BytesType), desc)
	canceled, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stopped")
	cancel(stop)
	for _, tc := range []struct {
		name string
		o    Options
		ctx  context.Context
		msgs [][]byte
		err  error  // nil: loads
		text string // what the error says
	}{
		{"1,000 rules, at most 999", Options{MaxRules: 999}, context.Background(), [][]byte{eg}, ErrTooManyRules, "more than 999"},
		{"1,000 rules, at most 1,000", Options{MaxRules: 1000}, context.Background(), [][]byte{eg}, nil, ""},
		{"under MaxMemory", Options{MaxMemory: est}, context.Background(), [][]byte{eg}, nil, ""},
		{"over MaxMemory", Options{MaxMemory: est - 1}, context.Background(), [][]byte{eg}, ErrTooMuchMemory, fmt.Sprintf("more than %d bytes", est-1)},
		{"40 levels, after 1,000 rules", Options{}, context.Background(), [][]byte{eg, push(t, deep)}, nil, "descriptors nested deeper than 32 levels"},
		{"a key given 1,000 times", Options{}, context.Background(), [][]byte{again}, nil, "more than the"},
		{"a load stopped", Options{}, canceled, [][]byte{eg}, stop, ""},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c, err := tc.o.LoadXDSContext(tc.ctx, tc.msgs)
		runtime.ReadMemStats(&after)
		switch {
		case tc.err == nil && tc.text == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == nil && tc.text == "" && c.Len() != 1000:
			t.Errorf("%s: %d rules", tc.name, c.Len())
		case tc.err != nil && !errors.Is(err, tc.err), err != nil && !strings.Contains(err.Error(), tc.text):
			t.Errorf("%s: %v; want %v, saying %q", tc.name, err, tc.err, tc.text)
		case (tc.err != nil || tc.text != "") && err == nil:
			t.Errorf("%s: loaded", tc.name)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; err != nil && !raceDetector && alloc > 64<<10 {
			t.Errorf("%s: refused after allocating %d bytes: its Config was made", tc.name, alloc)
		}
	}

	// Files: the rules past MaxRules, and the memory past MaxMemory.
	var y strings.Builder
	y.WriteString("domain: d\ndescriptors:\n")
	for i := range 100 {
		fmt.Fprintf(&y, "  - {key: k, value: v%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	f := []File{{"f.yaml", []byte(y.String())}}
	if _, err := (Options{MaxRules: 99}).Load(f); !errors.Is(err, ErrTooManyRules) || !strings.Contains(err.Error(), "f.yaml") {
		t.Errorf("a file over MaxRules: %v", err)
	}
	if _, err := (Options{MaxRules: 100, MaxMemory: 10_000}).Load(f); !errors.Is(err, ErrTooMuchMemory) {
		t.Errorf("a file over MaxMemory: %v", err)
	}
	if c, err := (Options{MaxRules: 100, MaxMemory: 1 << 20}).Load(f); err != nil || c.Len() != 100 {
		t.Errorf("a file within its bounds: %v", err)
	}
}
