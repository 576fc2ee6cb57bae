package shardlog

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkLogTake measures the log alone, without a registry: Take, the
// lock-free log against its mutex twin.
//
//	room          one key whose window holds about a hundredth of its
//	              limit, as on make bench's hot key
//	room-clock    the same, reading time.Since on every call, as the
//	              root package reads the SystemClock
//	room-parallel the same from every core
//	full          demand twice the limit: half the calls are denials and
//	              every grant finds the window nearly full
//	1K            a thousand keys, picked at random, each with room
//	1K-parallel   the same from every core
//
// Without -clock the time is a counter that moves on by step per call.
func BenchmarkLogTake(b *testing.B) {
	for _, sc := range []struct {
		name     string
		limit    int64
		per      time.Duration
		step     int64 // ns between calls, on one goroutine
		keys     int
		clock    bool
		parallel bool
	}{
		{"room", 1_000_000, time.Millisecond, 100, 1, false, false},
		{"room-clock", 1_000_000, time.Millisecond, 0, 1, true, false},
		{"room-parallel", 1_000_000, time.Millisecond, 0, 1, true, true},
		{"full", 100, 10 * time.Microsecond, 50, 1, false, false},
		{"full-parallel", 100, 10 * time.Microsecond, 0, 1, true, true},
		{"1K", 1_000_000, time.Millisecond, 100, 1000, false, false},
		{"1K-parallel", 1_000_000, time.Millisecond, 0, 1000, true, true},
	} {
		p := mustParams(b, sc.limit, sc.per)
		for _, m := range logMakers(b) {
			b.Run("scenario="+sc.name+"/impl="+m.name, func(b *testing.B) {
				logs := make([]twin, sc.keys)
				for i := range logs {
					logs[i] = m.new(p, 0)
				}
				picks := make([]uint16, 1<<16)
				for i := range picks {
					picks[i] = uint16(rand.IntN(sc.keys))
				}
				start := time.Now()
				b.ReportAllocs()
				if sc.parallel {
					b.RunParallel(func(pb *testing.PB) {
						for i := 0; pb.Next(); i++ {
							logs[picks[i&(1<<16-1)]].Take(int64(time.Since(start)), 1)
						}
					})
					return
				}
				now, i := int64(0), 0
				for b.Loop() {
					now += sc.step
					if sc.clock {
						now = int64(time.Since(start))
					}
					logs[picks[i&(1<<16-1)]].Take(now, 1)
					i++
				}
			})
		}
	}
}

// BenchmarkLogCharge measures ChargeN beside AllowN on one key, each on
// a log of its own, the lock-free log against its mutex twin:
//
//	room  a window that holds about a hundredth of its limit: both claim
//	full  demand twice the limit: half of AllowN's calls are denials,
//	      while every ChargeN claims and keeps the key owing about N
//
// The time is a counter that moves on by step per call.
func BenchmarkLogCharge(b *testing.B) {
	for _, sc := range []struct {
		name  string
		limit int64
		per   time.Duration
		step  int64
	}{
		{"room", 1_000_000, time.Millisecond, 100},
		{"full", 100, 10 * time.Microsecond, 50},
	} {
		p := mustParams(b, sc.limit, sc.per)
		for _, op := range []string{"allow", "charge"} {
			for _, m := range debtMakers(b) {
				b.Run("scenario="+sc.name+"/op="+op+"/impl="+m.name, func(b *testing.B) {
					s := m.new(p, 0)
					b.ReportAllocs()
					now := int64(0)
					for b.Loop() {
						now += sc.step
						if op == "charge" {
							if _, _, err := s.ChargeN(now, 1); err != nil {
								b.Fatal(err)
							}
						} else {
							s.AllowN(now, 1)
						}
					}
				})
			}
		}
	}
}
