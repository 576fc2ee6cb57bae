package config

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// loadCost loads files as o does and returns the load's error, the bytes
// it allocated in all, and the bytes it left live (the Config).
func loadCost(o Options, files []File) (allocated, live float64, err error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, err := o.Load(files)
	runtime.ReadMemStats(&after)
	allocated = float64(after.TotalAlloc - before.TotalAlloc)
	runtime.GC()
	runtime.ReadMemStats(&after)
	live = float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
	runtime.KeepAlive(c)
	return allocated, live, err
}

func size(files []File) (n float64) {
	for _, f := range files {
		n += float64(len(f.Data))
	}
	return n
}

// chain is a flow-style file of levels descriptors, each inside the one
// before, each with a key of keyLen bytes and a rule.
func chain(levels, keyLen int) []byte {
	var b strings.Builder
	b.WriteString("{domain: d, descriptors: ")
	for i := 0; i < levels; i++ {
		fmt.Fprintf(&b, "[{key: %s%d, rate_limit: {unit: second, requests_per_unit: 1}, descriptors: ", strings.Repeat("k", keyLen), i)
	}
	b.WriteString("[]")
	for i := 0; i < levels; i++ {
		b.WriteString("}]")
	}
	b.WriteString("}\n")
	return []byte(b.String())
}

// TestLoadCost: what a configuration costs to load is a small multiple
// of its bytes, whatever its shape, and a refused one costs no more.
func TestLoadCost(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	rules := func(n int) []byte {
		var b strings.Builder
		b.WriteString("domain: envoy-gateway/default/eg/http\ndescriptors:\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "  - key: httproute/default/backend/rule/0/match/0/route-%d\n    value: httproute/default/backend/rule/0/match/0/route-%d\n    descriptors:\n      - key: rule-0-match-0\n        rate_limit:\n          unit: MINUTE\n          requests_per_unit: %d\n", i, i, 10+i)
		}
		return []byte(b.String())
	}
	leaves := func(n int) []byte {
		var b strings.Builder
		b.WriteString("{domain: d, descriptors: [")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "{key: %x},", i)
		}
		b.WriteString("]}")
		return []byte(b.String())
	}
	dense := "domain: d\ndescriptors: [" + strings.Repeat("1,", 30<<20) + "1]\n"
	for _, tc := range []struct {
		name  string
		o     Options
		files []File
		err   string // "" for a load that succeeds
		// Bounds, as multiples of the files' bytes: all that the load
		// allocates, and what stays live.
		allocated, live float64
	}{
		{"10,000 rules", Options{}, []File{{"f", rules(10_000)}}, "", 12, 6},
		{"100,000 leaves", Options{}, []File{{"f", leaves(100_000)}}, "", 32, 12},
		{"1,500 levels of 1 KB keys", Options{}, []File{{"f", chain(1500, 1000)}}, "nested deeper than 200 levels", 2, 0.5},
		{"32 levels of 1 KB keys", Options{}, []File{{"f", chain(32, 1000)}}, "the rules' keys would take more than", 24, 0.5},
		{"33 levels", Options{}, []File{{"f", chain(33, 1)}}, "descriptors nested deeper than 32 levels", 24, 0.5},
		{"32 levels", Options{}, []File{{"f", chain(32, 1)}}, "", 24, 12},
		{"60 MiB of [1,1,…]", Options{}, []File{{"f", []byte(dense)}}, "f:2: expected a map of key", 0.01, 0.01},
		{"60 MiB of [1,1,…] over a bound of 1 MiB", Options{MaxBytes: 1 << 20}, []File{{"f", []byte(dense)}}, "more than 1048576 bytes", 0.01, 0.01},
	} {
		allocated, live, err := loadCost(tc.o, tc.files)
		n := size(tc.files)
		t.Logf("%s: %.0f bytes, allocated %.2fx, live %.2fx, %v", tc.name, n, allocated/n, live/n, err)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
		}
		if allocated > tc.allocated*n {
			t.Errorf("%s: allocated %.2f times its bytes, more than %v", tc.name, allocated/n, tc.allocated)
		}
		if live > tc.live*n {
			t.Errorf("%s: holds %.2f times its bytes, more than %v", tc.name, live/n, tc.live)
		}
	}
}
