package bench

import "github.com/floodgate-go/floodgate"

// tscImpl is floodgate-tb on floodgate's opt-in TSCClock
// ("floodgate-tb-tsc"): a plain RDTSC per call, anchored to the monotonic
// clock every 10ms. Where the processor has no invariant counter the
// benchmark fails rather than measure the fallback under this name.
func tscImpl() Impl {
	var clock *floodgate.TSCClock // of the latest New: benchmarks build one limiter at a time
	impl := floodgateImpl("floodgate-tb-tsc", floodgate.TokenBucket, false, func(c floodgate.Config) floodgate.Config {
		clock = floodgate.NewTSCClock()
		if !clock.Invariant() {
			c.Rule.Limit = 0 // New refuses it
		}
		c.Clock = clock
		return c
	})
	build := impl.New
	impl.New = func(o Options) (Limiter, func(), error) {
		l, release, err := build(o)
		stop := clock.Stop
		if err != nil {
			stop()
			return nil, nil, err
		}
		return l, func() { release(); stop() }, nil
	}
	return impl
}
