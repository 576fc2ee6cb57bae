package bench

import (
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/tsc"
)

// tscImpl is floodgate-tb on floodgate's opt-in TSCClock
// ("floodgate-tb-tsc"): a plain RDTSC per call, anchored to the monotonic
// clock every 10ms. Where the processor has no invariant counter (and on
// every architecture but amd64) the TSCClock would read the SystemClock,
// so the implementation reports itself unsupported, and its benchmarks
// and tests skip, rather than measure the fallback under this name.
func tscImpl() Impl {
	var clock *floodgate.TSCClock // of the latest New: benchmarks build one limiter at a time
	impl := floodgateImpl("floodgate-tb-tsc", floodgate.TokenBucket, false, func(c floodgate.Config) floodgate.Config {
		c.Clock = clock
		return c
	})
	build := impl.New
	impl.New = func(o Options) (Limiter, func(), error) {
		if !tsc.Invariant() { // NewTSCClock reads the counter if and only if it is invariant
			return nil, nil, fmt.Errorf("%w: no invariant time stamp counter here, and the TSC clock would read the SystemClock", errUnsupported)
		}
		clock = floodgate.NewTSCClock()
		stop := clock.Stop
		l, release, err := build(o)
		if err != nil {
			stop()
			return nil, nil, err
		}
		return l, func() { release(); stop() }, nil
	}
	return impl
}
