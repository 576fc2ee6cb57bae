// Package reading puts a time.Time on the scale of the state packages'
// readings: Unix nanoseconds, counted from a base time on the monotonic
// clock, so that a standalone bucket, window or log given time.Now()
// sees time advance as the monotonic clock does, whatever the wall clock
// does meanwhile.
package reading

import (
	"math"
	"time"
)

// Base is the time a state was made at, and that time in Unix
// nanoseconds.
type Base struct {
	t    time.Time
	unix int64
}

// New returns the base of a state made at t.
func New(t time.Time) Base { return Base{t: t, unix: t.UnixNano()} }

// Unix is the base in Unix nanoseconds: the reading of the base itself.
func (b *Base) Unix() int64 { return b.unix }

// At returns now on the base's scale: the base's Unix time plus the time
// since the base, on the monotonic clock when both readings carry it,
// saturating at the int64 range.
func (b *Base) At(now time.Time) int64 {
	d := int64(now.Sub(b.t))
	r := b.unix + d
	switch {
	case d > 0 && r < b.unix:
		return math.MaxInt64
	case d < 0 && r > b.unix:
		return math.MinInt64
	}
	return r
}
