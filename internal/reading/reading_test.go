package reading

import (
	"math"
	"testing"
	"time"
)

func TestAt(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b := New(t0)
	if b.Unix() != t0.UnixNano() {
		t.Fatalf("Unix %d, want %d", b.Unix(), t0.UnixNano())
	}
	for _, c := range []struct {
		now  time.Time
		want int64
	}{
		{t0, t0.UnixNano()},
		{t0.Add(time.Second), t0.UnixNano() + int64(time.Second)},
		{t0.Add(-time.Second), t0.UnixNano() - int64(time.Second)},
		{time.Unix(1<<62, 0), math.MaxInt64},
		// Sub saturates at the Duration's range, and then the sum
		// does not overflow: the reading lies as far back as a
		// Duration reaches.
		{time.Unix(-(1 << 62), 0), t0.UnixNano() + math.MinInt64},
	} {
		if got := b.At(c.now); got != c.want {
			t.Errorf("At(%v) = %d, want %d", c.now, got, c.want)
		}
	}
	// The monotonic clock counts, not the wall clock: a reading taken
	// from the base's own time.Now moves by the monotonic difference.
	now := time.Now()
	m := New(now)
	later := now.Add(time.Minute)
	if got, want := m.At(later), now.UnixNano()+int64(time.Minute); got != want {
		t.Errorf("At(now+1m) = %d, want %d", got, want)
	}
}
