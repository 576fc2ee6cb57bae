package bucket

import (
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkOneBucket measures a charge beside an admission on one bucket,
// on one goroutine, for each form: the lock-free Bucket, the inline word,
// and the two mutex twins. The clock is a counter that moves on by one
// interval a call, so that both operations take a unit every call and
// each is one CAS (or one critical section): a charge costs what an
// admission costs.
//
//	op=AllowN   AllowN(now, 1), every call admitted
//	op=ChargeN  ChargeN(now, 1), every call charged
func BenchmarkOneBucket(b *testing.B) {
	p := mustParams(b, 1_000_000, time.Second, 100) // 1µs a unit, scale 1
	step := p.interval / p.scale
	type ops struct {
		allow  func(now int64) bool
		charge func(now int64) bool
	}
	forms := []struct {
		name string
		make func() ops
	}{
		{"lockfree", func() ops {
			s := New(p, 0)
			return ops{
				func(now int64) bool { d, _ := s.AllowN(now, 1); return d.Allowed },
				func(now int64) bool { d, _, _ := s.ChargeN(now, 1); return d.Allowed },
			}
		}},
		{"word", func() ops {
			var w atomic.Uint64
			return ops{
				func(now int64) bool { d, _ := p.AllowWord(&w, 0, now, 1); return d.Allowed },
				func(now int64) bool { d, _, _ := p.ChargeWord(&w, 0, now, 1); return d.Allowed },
			}
		}},
		{"mutex", func() ops {
			s := NewMutex(p, 0)
			return ops{
				func(now int64) bool { d, _ := s.AllowN(now, 1); return d.Allowed },
				func(now int64) bool { d, _, _ := s.ChargeN(now, 1); return d.Allowed },
			}
		}},
		{"leaky", func() ops {
			s := NewLeakyMutex(p, 0)
			return ops{
				func(now int64) bool { d, _ := s.AllowN(now, 1); return d.Allowed },
				func(now int64) bool { d, _, _ := s.ChargeN(now, 1); return d.Allowed },
			}
		}},
	}
	for _, op := range []string{"AllowN", "ChargeN"} {
		for _, f := range forms {
			b.Run("op="+op+"/impl="+f.name, func(b *testing.B) {
				o := f.make()
				call := o.allow
				if op == "ChargeN" {
					call = o.charge
				}
				b.ReportAllocs()
				now := int64(0)
				for i := 0; i < b.N; i++ {
					now += step
					if !call(now) {
						b.Fatalf("call %d at %d: not admitted", i, now)
					}
				}
			})
		}
	}
}
