package bench

import (
	"math/rand/v2"
	"strconv"
	"testing"

	xsyncv3 "github.com/puzpuzpuz/xsync/v3"
	xsyncv4 "github.com/puzpuzpuz/xsync/v4"
)

// BenchmarkMapLoad measures the registry's hot operation, a Load of an
// existing key, on xsync v3's MapOf and v4's Map: the evidence behind
// choosing v4 (README, "xsync v4, not v3").
func BenchmarkMapLoad(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 20} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "client-" + strconv.Itoa(i)
		}
		v := new(int64)
		v3 := xsyncv3.NewMapOf[string, *int64]()
		v4 := xsyncv4.NewMap[string, *int64]()
		for _, k := range keys {
			v3.Store(k, v)
			v4.Store(k, v)
		}
		b.Run("keys="+strconv.Itoa(n)+"/impl=xsync-v3", func(b *testing.B) { benchLoad(b, v3, keys) })
		b.Run("keys="+strconv.Itoa(n)+"/impl=xsync-v4", func(b *testing.B) { benchLoad(b, v4, keys) })
	}
}

// benchLoad loads random existing keys from m on every core. Calling
// through the interface costs both maps the same.
func benchLoad(b *testing.B, m interface{ Load(string) (*int64, bool) }, keys []string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			if _, ok := m.Load(keys[r.IntN(len(keys))]); !ok {
				panic("lost a key")
			}
		}
	})
}
