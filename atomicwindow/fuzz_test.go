package atomicwindow

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
		}, func(now, sa, sm int64) (twintest.Twin, twintest.Twin) {
			return NewSpent(p, now, sa), NewMutexSpent(p, now, sm)
		})
	})
}
