package inflight_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// BenchmarkTryAcquireRelease times one TryAcquire and its Release, on the
// lock-free Limiter and its mutex twin: on one hot key from one goroutine
// and from every P, and on 1M keys: from one goroutine in a random order
// (each key's word a cache miss), and from every P (each goroutine walks
// the keys from its own random start). The limit is never reached.
func BenchmarkTryAcquireRelease(b *testing.B) {
	keys := make([]string, 1_000_000)
	for k := range keys {
		keys[k] = fmt.Sprint("client-", k)
	}
	for _, form := range []string{"lockfree", "mutex"} {
		build := func(b *testing.B) *inflight.Limiter {
			cfg := inflight.Config{Limit: inflight.MaxLimit}
			if form == "mutex" {
				cfg = testhook.InFlightTwin(cfg).(inflight.Config)
			}
			l, err := inflight.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			return l
		}
		b.Run("scenario=hotkey/form="+form, func(b *testing.B) {
			l := build(b)
			b.ReportAllocs()
			for b.Loop() {
				s, ok := l.TryAcquire("hot")
				if !ok {
					b.Fatal("refused")
				}
				s.Release()
			}
		})
		b.Run("scenario=hotkey-parallel/form="+form, func(b *testing.B) {
			l := build(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s, ok := l.TryAcquire("hot")
					if !ok {
						b.Error("refused")
						return
					}
					s.Release()
				}
			})
		})
		b.Run("scenario=1M-random/form="+form, func(b *testing.B) {
			l := build(b)
			for _, k := range keys {
				s, _ := l.TryAcquire(k)
				s.Release()
			}
			perm := rand.New(rand.NewPCG(1, 2)).Perm(len(keys))
			i := 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s, ok := l.TryAcquire(keys[perm[i]])
				if !ok {
					b.Fatal("refused")
				}
				s.Release()
				if i++; i == len(perm) {
					i = 0
				}
			}
		})
		b.Run("scenario=1M-parallel/form="+form, func(b *testing.B) {
			l := build(b)
			for _, k := range keys {
				s, _ := l.TryAcquire(k)
				s.Release()
			}
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.New(rand.NewPCG(seed.Add(1), 1)).IntN(len(keys))
				for pb.Next() {
					s, ok := l.TryAcquire(keys[i])
					if !ok {
						b.Error("refused")
						return
					}
					s.Release()
					if i++; i == len(keys) {
						i = 0
					}
				}
			})
		})
	}
}
