// Package bench is floodgate's benchmark harness: floodgate beside the rate
// limiters users choose between, measured in one run on the same machine.
//
// It is its own module, so that nothing imported only for comparison
// reaches the library's go.mod. Each peer is driven through an adapter that
// does what a user of that library writes (see Peers):
// golang.org/x/time/rate alone and as a sync.Map of limiters per key,
// sethvargo/go-limiter's memorystore, throttled's GCRA on its memstore,
// ulule/limiter's memory store, juju/ratelimit, and go.uber.org/ratelimit
// (which only waits, so it runs only at a rate where it never has to).
// Floodgate runs every algorithm, lock-free and its mutex twin, on the
// SystemClock and on a 1ms CoarseClock (see Floodgates), and the token
// bucket also on the reference registry and with Stats counting (see
// Variants) and on the opt-in TSCClock (floodgate-tb-tsc). Floor, FloorCAS
// and FloorCASClock are not limiters: they show what the harness alone, a
// hash with one CAS, and that with a read of the monotonic clock, cost in
// each key-set scenario and on a hot key.
//
// BenchmarkMiddleware compares the HTTP middlewares: in process, one
// request at a time (floodgate's httplimit, go-chi/httprate, go-limiter's
// httplimit), and on one redis-server it starts, 64 requests at once:
// httplimit on redislimit.NewStore (a round trip per request, lease mode,
// a route of two policies, and two policies in flight at once), ulule/
// limiter's stdlib middleware on its Redis store, and throttled's on its
// go-redis v9 store, with round trips, Redis's scripts and commands, and
// latency per request. BenchmarkRedis compares redislimit with
// go-redis/redis_rate on the same footing. BenchmarkRLS runs Envoy's
// rate-limit services as processes on one redis-server, envoyproxy/
// ratelimit (built from its module at a pinned version) and floodgate-rls
// (per request, in lease mode and in process), with each one's CPU a
// request; BenchmarkIdle, what floodgate-rls's rules cost while nobody
// asks for them (CPU, goroutines, heap a rule). BenchmarkCharge holds a
// cost known after the work, Charge and Reserve then Settle, against
// AllowN on the same keys, for every algorithm. BenchmarkInFlight times a
// slot of an in-flight limit taken and given back, floodgate's beside
// golang.org/x/sync/semaphore and acronis/go-appkit's per-key limiter,
// and the floors below which no exact count can go;
// BenchmarkInFlightRedis does the same on Redis, beside a sorted-set
// script written from Stripe's published design, with the renewals'
// traffic.
//
// The benchmarks (allow_test.go) are named so that `benchstat -col /impl`
// puts implementations side by side; BenchmarkPaired times the sliding log
// and its twin in alternate slices (Interleave), with scenarios whose
// goroutines pause between calls so that contention comes and goes, and
// cmd/pair does the same from the command line, for work on one design
// against another. cmd/modes shows, round by round, how the machine runs
// busy goroutines side by side (whether its cores run apart or share),
// and the sliding log on a hot key against its parallel floor and its
// twin. cmd/report turns the raw output into the summary tables and SVG
// charts under results/. `make bench-full` at the repository root runs
// all of it, and `make bench` what the headline tables need (see
// -headline); the harness measures and reports, and never asserts
// speed.
package bench
