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
		b.Run("keys="+strconv.Itoa(n)+"/impl=xsync-v3", func(b *testing.B) {
			m := xsyncv3.NewMapOf[string, *int64]()
			for _, k := range keys {
				m.Store(k, v)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					if _, ok := m.Load(keys[r.IntN(n)]); !ok {
						panic("lost a key")
					}
				}
			})
		})
		b.Run("keys="+strconv.Itoa(n)+"/impl=xsync-v4", func(b *testing.B) {
			m := xsyncv4.NewMap[string, *int64]()
			for _, k := range keys {
				m.Store(k, v)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					if _, ok := m.Load(keys[r.IntN(n)]); !ok {
						panic("lost a key")
					}
				}
			})
		})
	}
}
