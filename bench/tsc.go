package bench

import (
	"math/bits"

	"github.com/floodgate-go/floodgate"
	"github.com/loov/hrtime"
)

// tscClock is a floodgate.Clock on the CPU's time stamp counter, read with
// a plain RDTSC (hrtime.TSC), which, unlike the monotonic clock's vDSO
// read, does not wait for earlier loads to finish. It is here to measure
// what the SystemClock's read costs beyond the counter itself (see
// results/README.md); floodgate does not ship it. Counts are converted at
// a ratio hrtime calibrates once, as a 32.32 fixed-point multiplier.
type tscClock struct {
	start hrtime.Count
	mul   uint64
}

// newTSCClock returns a tscClock, or false where the CPU has no invariant
// TSC.
func newTSCClock() (*tscClock, bool) {
	if !hrtime.TSCSupported() {
		return nil, false
	}
	mul := uint64(hrtime.Count(1 << 32).ApproxDuration())
	return &tscClock{start: hrtime.TSC(), mul: mul}, true
}

// Now returns nanoseconds since the clock was made.
func (c *tscClock) Now() int64 {
	hi, lo := bits.Mul64(uint64(hrtime.TSC()-c.start), c.mul)
	return int64(hi<<32 | lo>>32)
}

// tscImpl is floodgate-tb on a tscClock ("floodgate-tb-tsc").
func tscImpl() Impl {
	return floodgateImpl("floodgate-tb-tsc", floodgate.TokenBucket, false, func(c floodgate.Config) floodgate.Config {
		if clock, ok := newTSCClock(); ok {
			c.Clock = clock
		} else {
			c.Rule.Limit = 0 // New refuses it: the benchmark fails rather than measure another clock
		}
		return c
	})
}
