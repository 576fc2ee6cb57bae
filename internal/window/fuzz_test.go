package window

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/twintest"
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
		limit, period := twintest.Pick(data, []int64{1, 2, 5, 100, 1_000_000}, []time.Duration{3, time.Millisecond, time.Second, 30 * 24 * time.Hour})
		p, err := NewParams(kind, limit, period)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(int16(binary.LittleEndian.Uint16(data[2:4]))) * int64(period) / 3
		twintest.Run(t, data[4:], now, limit, period, New(p, now), NewMutex(p, now), func(a, m twintest.Twin, now int64) (twintest.Twin, twintest.Twin) {
			return a.(*Window).Successor(now), m.(*MutexWindow).Successor(now)
		}, func(now, sa, oa, sm, om int64) (twintest.Twin, twintest.Twin) {
			return NewSpent(p, now, sa, oa), NewMutexSpent(p, now, sm, om)
		})
	})
}

// FuzzCharge feeds the same operations to the three forms of a window
// (Window, MutexWindow, and a word inline in a table), for both kinds, and
// requires the same answers: charges into debt, at the bound and past it,
// costs below 1, admissions and Take while in debt, refunds of debts,
// peeks, and the clock moving back a little and forward near and far
// (successors, rebases). The seed corpus charges in every entry.
func FuzzCharge(f *testing.F) {
	// Each entry: kind and limit, period, the clock's start, then the
	// operations (see runCharges).
	f.Add([]byte{4, 3, 0, 0, 154, 10, 12, 55, 19, 10, 253, 247, 4, 24, 14, 3, 13})              // fixed 1,000/h: debt, refusals, paid at the window's end, the bound
	f.Add([]byte{5, 2, 0, 0, 154, 10, 19, 10, 246, 246, 246, 246, 246, 10, 55, 19, 10, 29, 10}) // sliding 1,000/s: a debt ages out
	f.Add([]byte{0, 1, 0, 0, 4, 24, 14, 13, 10, 55, 255, 10, 19, 10})                           // fixed 1/ms: the bound, one past, a refund of all
	f.Add([]byte{1, 1, 0, 0, 4, 24, 14, 10, 56, 10, 88, 10, 4, 98, 14, 10, 97, 33})             // sliding 1/ms: far jumps in debt
	f.Add([]byte{8, 2, 0, 128, 154, 4, 24, 14, 10, 29, 10, 255, 0})                             // fixed at the largest limit, whose bound is the limit
	f.Add([]byte{9, 2, 0, 128, 154, 4, 24, 14, 10, 19, 14, 10, 29, 10, 255, 0})                 // sliding at the largest limit: owing beside a full prev
	f.Add([]byte{3, 3, 255, 255, 19, 33, 247, 33, 53, 10, 206, 10, 154, 247, 14, 24})           // sliding 5/h: a charge read before the state's window
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		kind := Fixed
		if data[0]&1 == 1 {
			kind = Sliding
		}
		limits := []int64{1, 5, 1000, 1000, maxLimit(kind)}
		periods := []time.Duration{3, time.Millisecond, time.Second, time.Hour, 30 * 24 * time.Hour}
		limit, period := limits[int(data[0]>>1)%len(limits)], periods[int(data[1])%len(periods)]
		p, err := NewParams(kind, limit, period)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(int16(binary.LittleEndian.Uint16(data[2:4]))) * int64(period) / 3
		runCharges(t, p, now, data[4:])
	})
}
