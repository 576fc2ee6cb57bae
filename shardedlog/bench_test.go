package shardedlog

import (
	"testing"
	"time"
)

// BenchmarkLogTake measures the log alone, without a registry or a clock
// read: Take on one key, the lock-free log against its mutex twin. On
// "room" the window holds about a hundredth of its limit, as on
// make bench's hot key; on "full" demand is twice the limit, so half the
// calls are denials and every grant finds the window nearly full. With
// one goroutine the clock is a counter; in parallel it is time.Since, read
// by every call, as the root package reads it.
func BenchmarkLogTake(b *testing.B) {
	for _, sc := range []struct {
		name  string
		limit int64
		per   time.Duration
		step  int64 // ns between calls, on one goroutine
	}{
		{"room", 1_000_000, time.Millisecond, 100},
		{"full", 100, 10 * time.Microsecond, 50},
	} {
		p := mustLogParams(b, sc.limit, sc.per)
		for _, m := range logMakers(b) {
			b.Run("scenario="+sc.name+"/impl="+m.name, func(b *testing.B) {
				s := m.new(p, 0)
				now := int64(0)
				b.ReportAllocs()
				for b.Loop() {
					now += sc.step
					s.Take(now, 1)
				}
			})
			b.Run("scenario="+sc.name+"-parallel/impl="+m.name, func(b *testing.B) {
				start := time.Now()
				s := m.new(p, 0)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						s.Take(int64(time.Since(start)), 1)
					}
				})
			})
		}
	}
}
