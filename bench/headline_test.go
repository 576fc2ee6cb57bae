package bench

import (
	"flag"
	"slices"
)

// headlineFlag cuts a run to the benchmarks of the headline tables, the
// figures a user reads first: one hot key and a million keys beside the
// per-key peers, the HTTP middleware, Redis beside redis_rate, and
// floodgate-rls beside envoyproxy/ratelimit. `make bench` sets it, and
// runs only those families (see bench/run.sh); `make bench-full` runs
// every family whole. Under it:
//
//   - BenchmarkAllow runs the hot key from one goroutine and from every
//     core, denials from every core and a new key every call
//     (churn-parallel), and BenchmarkKeys 1K, 100K and 1M keys picked
//     uniformly from every core and the bytes a key at 1M, each for
//     headlineImpls only;
//   - BenchmarkMiddleware leaves out the uncounted middleware and, on
//     Redis, the routes of two policies and two tiers;
//   - BenchmarkRedis runs 1 and 64 goroutines (not 8), and the paired
//     scenarios;
//   - BenchmarkRLS takes no CPU profile (a second a scenario and service
//     whatever -benchtime says): its own-CPU columns are left empty.
//
// The families it does not name run whole under it too.
var headlineFlag = flag.Bool("headline", false, "run only the benchmarks of the headline tables (make bench); without it, every benchmark of the families -test.bench selects (make bench-full)")

// headline reports whether the run is cut to the headline tables.
func headline() bool { return *headlineFlag }

// headlineImpls are the implementations of the headline tables'
// in-process rows: floodgate's default on both clocks, every per-key
// peer (the "best per-key peer" is the fastest of them), and the floor
// that the at-a-glance table shows beside them.
var headlineImpls = append(ByName("floodgate-tb", "floodgate-tb-coarse", "xtime-syncmap", "golimiter", "throttled", "ulule"), FloorCASClock)

// headlineAllow are BenchmarkAllow's scenarios under -headline.
var headlineAllow = []string{"hotkey", "hotkey-parallel", "denial-parallel", "churn-parallel"}

// inHeadline returns impls, or under -headline those of them that are
// headlineImpls.
func inHeadline(impls []Impl) []Impl {
	if !headline() {
		return impls
	}
	var out []Impl
	for _, i := range impls {
		if slices.ContainsFunc(headlineImpls, func(h Impl) bool { return h.Name == i.Name }) {
			out = append(out, i)
		}
	}
	return out
}

// headlineCuts reports whether -headline leaves out name (a scenario, an
// implementation or a goroutine count of a family it cuts), which it
// does unless name is one of keep.
func headlineCuts(name string, keep ...string) bool {
	return headline() && !slices.Contains(keep, name)
}
