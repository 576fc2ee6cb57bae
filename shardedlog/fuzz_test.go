package shardedlog

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/twintest"
)

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
		limit, period := twintest.Pick(data, []int64{1, 2, 5, 16, 100}, []time.Duration{1, 10, time.Millisecond, time.Second, 30 * 24 * time.Hour})
		p, err := NewParams(limit, period)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(int16(binary.LittleEndian.Uint16(data[2:4]))) * int64(period)
		twintest.Run(t, data[4:], now, limit, period, New(p, now), NewMutex(p, now), func(a, m twintest.Twin, now int64) (twintest.Twin, twintest.Twin) {
			return a.(*Log).Successor(now), m.(*MutexLog).Successor(now)
		}, func(now, sa, sm int64) (twintest.Twin, twintest.Twin) {
			return NewSpent(p, now, sa), NewMutexSpent(p, now, sm)
		})
	})
}
