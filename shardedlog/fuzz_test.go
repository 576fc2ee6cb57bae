package shardedlog

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzTwins feeds the same operations to Window and MutexWindow, for both
// kinds, and requires the same answers: clock moves both ways and far,
// valid and invalid costs, Take against AllowN, peeks, refunds, idle
// retirement, resets, and the successors that replace retired states.
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
		limits := []int64{1, 2, 5, 100, 1_000_000}
		periods := []time.Duration{3, time.Millisecond, time.Second, 30 * 24 * time.Hour}
		limit := limits[int(data[1])%len(limits)]
		period := periods[int(data[2])%len(periods)]
		p, err := NewParams(kind, limit, period)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(int16(binary.LittleEndian.Uint16(data[2:4]))) * int64(period) / 3
		a, m := New(p, now), NewMutex(p, now)
		step := max(1, int64(period)/limit)
		for i := 4; i < len(data); i++ {
			op, arg := data[i]%10, int64(data[i]/10)
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
				if arg%5 == 0 {
					a.Retire()
					m.Retire()
				}
			}
			_, la := a.Peek(now)
			_, lm := m.Peek(now)
			if la != lm {
				t.Fatalf("op %d: one twin retired, the other not", i)
			}
			if !la {
				a, m = a.Successor(now), m.Successor(now)
			}
		}
	})
}

// FuzzLogTwins feeds the same operations to Log and MutexLog: clock moves
// both ways and far, bursts that grow the ring and gaps that shrink it,
// valid and invalid costs, Take against AllowN, peeks, refunds, idle
// retirement, resets and successors.
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
		limits := []int64{1, 2, 5, 16, 100}
		periods := []time.Duration{1, 10, time.Millisecond, time.Second, 30 * 24 * time.Hour}
		limit := limits[int(data[0])%len(limits)]
		period := periods[int(data[1])%len(periods)]
		p, err := NewLogParams(limit, period)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(int16(binary.LittleEndian.Uint16(data[2:4]))) * int64(period)
		a, m := NewLog(p, now), NewMutexLog(p, now)
		step := max(1, int64(period)/limit)
		for i := 4; i < len(data); i++ {
			op, arg := data[i]%10, int64(data[i]/10)
			n := arg % (limit + 2)
			switch op {
			case 0, 1:
				da, la := a.AllowN(now, n)
				dm, lm := m.AllowN(now, n)
				if da != dm || la != lm {
					t.Fatalf("op %d AllowN(%d, %d): lock-free %+v %v, mutex %+v %v", i, now, n, da, la, dm, lm)
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
				now += arg * int64(period) << (arg % 40)
			case 9:
				if arg%5 == 0 {
					a.Retire()
					m.Retire()
				}
			}
			_, la := a.Peek(now)
			_, lm := m.Peek(now)
			if la != lm {
				t.Fatalf("op %d: one twin retired, the other not", i)
			}
			if !la {
				a, m = a.Successor(now), m.Successor(now)
			}
		}
	})
}
