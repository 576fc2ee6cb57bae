package shardedlog

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzTwins feeds the same operations to Window and MutexWindow, for both
// kinds, and requires the same answers: clock moves both ways and far,
// valid and invalid costs, Take against AllowN, peeks, refunds, idle
// retirement, resets, the successors that replace retired states, and
// evictions whose states are made again with NewSpent and NewMutexSpent.
func FuzzTwins(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 3, 1, 9, 0, 0, 0, 13, 13, 23, 33, 43, 5, 6, 7, 8})
	f.Add([]byte{1, 0, 7, 255, 28, 38, 48, 58, 68, 78, 88, 98, 0, 1, 2})
	f.Add([]byte{0, 2, 3, 128, 4, 4, 4, 14, 24, 9, 19, 29, 39, 1, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		kind := Fixed
		if data[0]&1 == 1 {
			kind = Sliding
		}
		limit, period := pick(data, []int64{1, 2, 5, 100, 1_000_000}, []time.Duration{3, time.Millisecond, time.Second, 30 * 24 * time.Hour})
		p, err := NewParams(kind, limit, period)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(int16(binary.LittleEndian.Uint16(data[2:4]))) * int64(period) / 3
		runTwins(t, data[4:], now, limit, period, New(p, now), NewMutex(p, now), func(a, m twin, now int64) (twin, twin) {
			return a.(*Window).Successor(now), m.(*MutexWindow).Successor(now)
		}, func(now, sa, sm int64) (twin, twin) {
			return NewSpent(p, now, sa), NewMutexSpent(p, now, sm)
		})
	})
}

// FuzzLogTwins does the same for Log and MutexLog, whose rings also grow
// under bursts and shrink after gaps.
func FuzzLogTwins(f *testing.F) {
	if !lockFreeLog {
		f.Skip("no 16-byte CAS on this machine")
	}
	f.Add([]byte{0, 1, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 13, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 33, 43, 53, 7, 17, 27})
	f.Add([]byte{4, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 83, 1, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		limit, period := pick(data, []int64{1, 2, 5, 16, 100}, []time.Duration{1, 10, time.Millisecond, time.Second, 30 * 24 * time.Hour})
		p, err := NewLogParams(limit, period)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(int16(binary.LittleEndian.Uint16(data[2:4]))) * int64(period)
		runTwins(t, data[4:], now, limit, period, NewLog(p, now), NewMutexLog(p, now), func(a, m twin, now int64) (twin, twin) {
			return a.(*Log).Successor(now), m.(*MutexLog).Successor(now)
		}, func(now, sa, sm int64) (twin, twin) {
			return NewLogSpent(p, now, sa), NewMutexLogSpent(p, now, sm)
		})
	})
}

// pick chooses a rule from the input's first two bytes.
func pick(data []byte, limits []int64, periods []time.Duration) (int64, time.Duration) {
	return limits[int(data[0])%len(limits)], periods[int(data[1])%len(periods)]
}

// runTwins applies one operation per byte of ops to a lock-free state a and
// its twin m, and fails at the first answer on which they differ. A retired
// pair is replaced by its successors, as the registry would; an evicted
// pair, by the states spent makes from the instants Evict reported.
func runTwins(t *testing.T, ops []byte, now, limit int64, period time.Duration, a, m twin,
	successors func(a, m twin, now int64) (twin, twin), spent func(now, sa, sm int64) (twin, twin)) {
	step := max(1, int64(period)/limit)
	for i, b := range ops {
		op, arg := b%10, int64(b/10)
		n := arg % (limit + 2) // 0 and limit+1 are invalid costs
		switch op {
		case 0, 1:
			da, la := a.AllowN(now, n)
			dm, lm := m.AllowN(now, n)
			if da != dm || la != lm {
				t.Fatalf("op %d AllowN(%d, %d): lock-free %+v %v, mutex %+v %v", i, now, n, da, la, dm, lm)
			}
			if da.Remaining < 0 || da.Remaining > limit || da.RetryAfter < 0 || da.ResetAfter < 0 {
				t.Fatalf("op %d: decision out of range: %+v", i, da)
			}
		case 2:
			ta, la := a.Take(now, n)
			dm, lm := m.AllowN(now, n)
			if ta != dm.Allowed || la != lm {
				t.Fatalf("op %d: Take = %v %v, AllowN = %+v %v", i, ta, la, dm, lm)
			}
		case 3:
			now += arg * step / 2
		case 4:
			now -= arg * step / 3
		case 5:
			da, la := a.Peek(now)
			dm, lm := m.Peek(now)
			if da != dm || la != lm {
				t.Fatalf("op %d Peek: lock-free %+v %v, mutex %+v %v", i, da, la, dm, lm)
			}
		case 6:
			if a.Refund(now, n) != m.Refund(now, n) {
				t.Fatalf("op %d Refund differs", i)
			}
		case 7:
			if a.RetireIdle(now) != m.RetireIdle(now) {
				t.Fatalf("op %d RetireIdle differs", i)
			}
		case 8:
			now += arg * int64(period) << (arg % 40) // far jumps: rebases
		case 9:
			switch arg % 5 {
			case 0:
				a.Retire()
				m.Retire()
			case 1:
				sa, sm := a.(evicter).Evict(now), m.(evicter).Evict(now)
				if sa != sm {
					t.Fatalf("op %d Evict(%d): lock-free %d, mutex %d", i, now, sa, sm)
				}
				a, m = spent(now, sa, sm)
			}
		}
		_, la := a.Peek(now)
		_, lm := m.Peek(now)
		if la != lm {
			t.Fatalf("op %d: one twin retired, the other not", i)
		}
		if !la {
			a, m = successors(a, m, now)
		}
	}
}
