package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/memcachelimit"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/go-redis/redis_rate/v10"
	"github.com/loov/hrtime"
	"github.com/redis/go-redis/v9"
)

// redisKeys is how many clients the Redis benchmark spreads its checks
// over, so that both limiters read and write real per-key state.
const redisKeys = 1000

// redisPeer is one limiter of the Redis benchmark: check decides one
// request, calls counts its round trips so far (nil: one per check, or
// none for the in-process limiter), close ends it.
type redisPeer struct {
	check func(ctx context.Context, key string) (bool, error)
	calls func() int64
	close func()
}

// redisRule admits every check of the benchmark: a bucket of a billion at
// 1 µs a token, the smallest step Redis's clock holds.
var redisRule = floodgate.Rule{Limit: 1_000_000_000, Period: 1000 * time.Second}

// redisLease is lease mode's setting in the benchmark: a batch of up to
// 500,000 units, which from a full bucket at 1 µs a token lasts 500 ms,
// half the TTL (the batch's target time).
var redisLease = redislimit.Lease{Max: 500_000, TTL: time.Second}

// redisPeers are the limiters compared on one server in one run:
// floodgate's redislimit with the token bucket (GCRA in integer µs), a
// round trip per check and in lease mode; memcachelimit, floodgate's
// Store on a memcached beside the redis-server, a policy of the same
// rule decided per check (a gets and a cas per check, fewer where
// concurrent checks of a key share a round); go-redis/redis_rate (GCRA
// in floats); and floodgate's in-process limiter on the same rule, the
// latency lease mode aims at. Each Redis limiter has a client of its own
// with the same options.
var redisPeers = []struct {
	name  string
	redis bool
	make  func(b *testing.B, c *redis.Client, mc string) redisPeer
}{
	{"floodgate", true, func(b *testing.B, c *redis.Client, _ string) redisPeer {
		return redislimitPeer(b, c, redislimit.Lease{})
	}},
	{"floodgate-lease", true, func(b *testing.B, c *redis.Client, _ string) redisPeer {
		return redislimitPeer(b, c, redisLease)
	}},
	{"floodgate-memcached", false, func(b *testing.B, _ *redis.Client, mc string) redisPeer {
		return memcachelimitPeer(b, mc)
	}},
	{"redis_rate", true, func(b *testing.B, c *redis.Client, _ string) redisPeer {
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: 1000 * time.Second}
		return redisPeer{check: func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, key, limit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}, close: func() {}}
	}},
	{"in-process", false, func(b *testing.B, _ *redis.Client, _ string) redisPeer {
		l, err := floodgate.New(floodgate.Config{Rule: redisRule})
		if err != nil {
			b.Fatal(err)
		}
		return redisPeer{check: func(_ context.Context, key string) (bool, error) {
			return l.Allow(key), nil
		}, calls: func() int64 { return 0 }, close: func() {}}
	}},
}

// memcachelimitPeer is memcachelimit's Store on the memcached at addr,
// one policy of redisRule (the token bucket), each check a Decide of
// one Ask. Its client keeps 64 idle connections, as the Redis clients'
// pools hold 64; FailClosed, as redislimitPeer's.
func memcachelimitPeer(b *testing.B, addr string) redisPeer {
	c := memcache.New(addr)
	c.MaxIdleConns, c.Timeout = 64, time.Second
	s, err := memcachelimit.NewStore(c, memcachelimit.Config{Prefix: "bench-redis:", Timeout: time.Second, FailureMode: memcachelimit.FailClosed})
	if err != nil {
		b.Fatal(err)
	}
	p, err := s.Policy("checks", "", redisRule)
	if err != nil {
		b.Fatal(err)
	}
	return redisPeer{
		check: func(ctx context.Context, key string) (bool, error) {
			var each [1]floodgate.Decision
			d, _, err := s.Decide(ctx, []floodgate.Ask{{Policy: p, Key: key, N: 1}}, each[:])
			return d.Allowed, err
		},
		calls: func() int64 { return s.Stats().Calls },
		close: func() {
			if err := s.Close(); err != nil {
				b.Error(err)
			}
			c.Close()
		},
	}
}

// redislimitPeer is redislimit on c, with lease mode as lease says.
// FailClosed: a call Redis failed is a denial, which benchRedis reports,
// rather than a local grant that would hide it.
func redislimitPeer(b *testing.B, c *redis.Client, lease redislimit.Lease) redisPeer {
	l, err := redislimit.New(c, redislimit.Config{Rule: redisRule, Timeout: time.Second, FailureMode: redislimit.FailClosed, Lease: lease})
	if err != nil {
		b.Fatal(err)
	}
	return redisPeer{
		check: func(ctx context.Context, key string) (bool, error) {
			d, err := l.Allow(ctx, key)
			return d.Allowed, err
		},
		calls: func() int64 { return l.Stats().Calls },
		close: func() {
			if err := l.Close(); err != nil {
				b.Error(err)
			}
		},
	}
}

// BenchmarkRedis runs each limiter on one redis-server that it starts on
// loopback, with 1, 8 and 64 goroutines checking random keys of 1,000
// (scenario 1K-keys) or one key (hotkey). Before each figure the same
// goroutines check for 200 ms untimed, so that lease mode's batches have
// grown to their steady size. It reports ns/op as wall time per check,
// checks/s, round trips per check (rt/check: 1 for redis_rate, 0 for the
// in-process limiter), the p50, p99 and p99.9 of one check's latency, and
// from INFO commandstats (reset before each figure) the scripts Redis ran
// per check and the server's own cost per call (EVALSHA's calls and
// usec_per_call). Then, at one goroutine, where a check is a round trip's
// latency and two runs seconds apart differ by more than the two
// limiters do, it runs floodgate and redis_rate in turn (scenarios
// 1K-keys-paired and hotkey-paired; see benchRedisPaired). Under
// -headline, 1 and 64 goroutines only. Without redis-server it skips,
// with a message.
func BenchmarkRedis(b *testing.B) {
	if _, err := redistest.Find(); err != nil {
		b.Skip(err)
	}
	srv := redistest.Start(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { admin.Close() })
	keys := make([]string, redisKeys)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	scenarios := []struct {
		name string
		keys []string
	}{{"1K-keys", keys}, {"hotkey", []string{"hot"}}}
	made := map[string]redisPeer{}
	mc := startBenchMemcached(b)
	for _, peer := range redisPeers {
		if peer.name == "floodgate-memcached" && mc == "" {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64, MinIdleConns: 64})
		b.Cleanup(func() { c.Close() })
		p := peer.make(b, c, mc)
		b.Cleanup(p.close)
		made[peer.name] = p
		for _, k := range append(keys, "hot") { // every key exists before the timed runs
			if _, err := p.check(context.Background(), k); err != nil {
				b.Fatal(err)
			}
		}
		for _, sc := range scenarios {
			for _, g := range []int{1, 8, 64} {
				if headlineCuts(strconv.Itoa(g), "1", "64") {
					continue
				}
				b.Run("impl="+peer.name+"/scenario="+sc.name+"/g="+strconv.Itoa(g), func(b *testing.B) {
					runFor(g, 200*time.Millisecond, checkLoop(p.check, nil, sc.keys, nil, nil))
					if peer.redis {
						if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
							b.Fatal(err)
						}
					}
					var before int64
					if p.calls != nil {
						before = p.calls()
					}
					local := p.calls
					if peer.name != "floodgate-lease" {
						local = nil // one round trip a check, or none
					}
					checks := benchRedis(b, g, p.check, local, sc.keys)
					switch {
					case p.calls != nil:
						b.ReportMetric(float64(p.calls()-before)/float64(checks), "rt/check")
					default:
						b.ReportMetric(1, "rt/check")
					}
					if peer.redis {
						calls, us, err := evalshaStats(admin)
						if err != nil {
							b.Fatal(err)
						}
						if calls > 0 { // lease mode may make no call in the interval
							b.ReportMetric(us, "server-us/call")
						}
						// Scripts Redis ran per check: a renewal pipeline is
						// one round trip but runs a script per key.
						b.ReportMetric(calls/float64(checks), "scripts/check")
					}
				})
			}
		}
	}
	for _, sc := range scenarios {
		benchRedisPaired(b, sc.name+"-paired", sc.keys, []string{"floodgate", "redis_rate"}, made)
	}
}

// redisPairedRounds and redisPairedSlice are benchRedisPaired's rounds
// and the length of each limiter's slice in a round: at one goroutine a
// slice holds some 400 checks, and a pass spends a second on a scenario.
const (
	redisPairedRounds = 20
	redisPairedSlice  = 25 * time.Millisecond
)

// benchRedisPaired runs the limiters named in turn at one goroutine, in
// slices (see Interleave), on keys picked uniformly, and reports for each
// (impl=name, g=1) the median slice's wall time per check as ns/op and
// one round trip a check; the first also reports "ratio", the median over
// rounds of its slice ÷ the last's. A check that fails or is refused
// fails the benchmark.
func benchRedisPaired(b *testing.B, scenario string, keys []string, names []string, made map[string]redisPeer) {
	var res *Interleaved
	measure := func(b *testing.B) Interleaved {
		if res == nil {
			ls := make([]Limiter, len(names))
			for i, n := range names {
				ls[i] = checker(made[n].check)
			}
			r := Interleave(ls, keys, picks(len(keys), "uniform"), 1, 0, redisPairedRounds, redisPairedSlice)
			res = &r
		}
		return *res
	}
	for i, name := range names {
		b.Run("impl="+name+"/scenario="+scenario+"/g=1", func(b *testing.B) {
			r := measure(b)
			for b.Loop() {
			}
			if r.Denied[i] > 0 {
				b.Fatalf("%s failed or refused %.4f of its checks", name, r.Denied[i])
			}
			b.ReportMetric(r.Ns[i], "ns/op")
			b.ReportMetric(1e9/r.Ns[i], "checks/s")
			b.ReportMetric(1, "rt/check")
			if i == 0 {
				b.ReportMetric(r.Ratio[0], "ratio")
			}
		})
	}
}

// checker is a Redis-backed check as a Limiter: a check that fails is a
// refusal.
type checker func(ctx context.Context, key string) (bool, error)

// Allow checks key with no deadline.
func (c checker) Allow(key string) bool {
	ok, err := c(context.Background(), key)
	return ok && err == nil
}

// checkLoop is one goroutine's work: checks of random keys until stop,
// each timed into all when record is not nil, and into local too when
// calls (the limiter's round trips so far, read outside the timed span)
// did not move during it; a failed or denied check is stored in failed
// and ends the loop.
func checkLoop(check func(context.Context, string) (bool, error), calls func() int64, keys []string, failed *atomic.Value,
	record func(all, local []time.Duration)) func(*atomic.Bool) int {
	return func(stop *atomic.Bool) int {
		ctx := context.Background()
		var all, local []time.Duration
		n := 0
		for !stop.Load() {
			k := keys[rand.IntN(len(keys))]
			var before int64
			if calls != nil && record != nil {
				before = calls()
			}
			start := stampNow()
			ok, err := check(ctx, k)
			if record != nil {
				d := start.since().duration()
				all = append(all, d)
				if calls != nil && calls() == before {
					local = append(local, d)
				}
			}
			if err != nil || !ok {
				if failed != nil {
					failed.Store(fmt.Sprintf("a check failed or was denied: %v", err))
				}
				break
			}
			n++
		}
		if record != nil {
			record(all, local)
		}
		return n
	}
}

// benchRedis runs g goroutines of checks for the bench time, reports the
// latency percentiles of the checks and checks/s beside timed's figures,
// and returns how many checks it counted. For a limiter that counts its
// round trips, it reports the percentiles of the checks served with no
// round trip of its own too (p99-local-ns): those during which the
// limiter's count of round trips did not move (with g > 1, another
// goroutine's round trip excludes a check too, so the figure leaves out a
// few local checks that overlapped one).
func benchRedis(b *testing.B, g int, check func(context.Context, string) (bool, error), calls func() int64, keys []string) int {
	var (
		mu         sync.Mutex
		all, local []time.Duration
		failed     atomic.Value
	)
	calibrateStamps()
	start := time.Now()
	checks := timed(b, g, checkLoop(check, calls, keys, &failed, func(a, l []time.Duration) {
		mu.Lock()
		all, local = append(all, a...), append(local, l...)
		mu.Unlock()
	}))
	elapsed := time.Since(start)
	if msg := failed.Load(); msg != nil {
		b.Fatal(msg)
	}
	h := hrtime.NewDurationHistogram(all, &hrtime.HistogramOptions{BinCount: 1})
	b.ReportMetric(float64(checks)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(h.P50, "p50-ns")
	b.ReportMetric(h.P99, "p99-ns")
	b.ReportMetric(h.P999, "p99.9-ns")
	if calls != nil && len(local) > 0 {
		hl := hrtime.NewDurationHistogram(local, &hrtime.HistogramOptions{BinCount: 1})
		b.ReportMetric(hl.P99, "p99-local-ns")
		b.ReportMetric(hl.P999, "p99.9-local-ns")
	}
	return checks
}

// evalshaStats reads the server's EVALSHA calls and mean time per call
// since the last CONFIG RESETSTAT. Redis lists a command in INFO
// commandstats only once it has run since the reset: no
// cmdstat_evalsha line means no call (lease mode can serve a whole
// interval from batches taken before it), and reads as 0 calls. A line
// that is there but cannot be read is an error.
func evalshaStats(c *redis.Client) (calls, usPerCall float64, err error) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	return parseEvalsha(info)
}

// parseEvalsha reads EVALSHA's calls and usec_per_call from the text of
// INFO commandstats.
func parseEvalsha(info string) (calls, usPerCall float64, err error) {
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		var seen int
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			var dst *float64
			switch k {
			case "calls":
				dst = &calls
			case "usec_per_call":
				dst = &usPerCall
			default:
				continue
			}
			if *dst, err = strconv.ParseFloat(v, 64); err != nil {
				return 0, 0, fmt.Errorf("cmdstat_evalsha's %s in INFO commandstats: %w", k, err)
			}
			seen++
		}
		if seen != 2 {
			return 0, 0, fmt.Errorf("cmdstat_evalsha in INFO commandstats lacks calls or usec_per_call: %q", line)
		}
		return calls, usPerCall, nil
	}
	return 0, 0, nil
}
