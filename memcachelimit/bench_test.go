package memcachelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
)

// BenchmarkDecide decides requests of one policy on a real memcached on
// loopback, from GOMAXPROCS×4 goroutines: of one key (which this
// process's steps take in turn), and of many keys (each goroutine its
// own run of 1,024). Each request that admits costs two round trips (a
// get and a cas); ReportAllocs shows the client's allocations per
// request.
func BenchmarkDecide(b *testing.B) {
	srv := memcachetest.Start(b)
	for _, bc := range []struct {
		name string
		keys int
	}{{"OneKey", 1}, {"ManyKeys", 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			s := newStore(b, newClient(b, srv.Addr()), Config{Prefix: "bench:"})
			p := mustPolicy(b, s, bc.name, floodgate.TokenBucket, floodgate.Rule{Limit: 1 << 30, Period: time.Hour})
			keys := make([]string, min(bc.keys, 1<<16))
			for i := range keys {
				keys[i] = "client-" + strconv.Itoa(i)
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				base := int(next.Add(1024))
				ask := []floodgate.Ask{{Policy: p, N: 1}}
				i := 0
				for pb.Next() {
					ask[0].Key = keys[(base+i)%len(keys)]
					i++
					if _, _, err := s.Decide(context.Background(), ask, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
			st := s.Stats()
			b.ReportMetric(float64(st.Calls)/float64(b.N), "trips/op")
			b.ReportMetric(float64(st.CASConflicts)/float64(b.N), "conflicts/op")
		})
	}
}
