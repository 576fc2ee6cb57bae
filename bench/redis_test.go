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

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/go-redis/redis_rate/v10"
	"github.com/loov/hrtime"
	"github.com/redis/go-redis/v9"
)

// redisKeys is how many clients the Redis benchmark spreads its checks
// over, so that both limiters read and write real per-key state.
const redisKeys = 1000

// redisPeers are the Redis-backed limiters compared on one server in one
// run: floodgate's redislimit (token bucket, GCRA in integer µs) and
// go-redis/redis_rate (GCRA in floats), each with a client of its own with
// the same options and a rule that admits every check, so that every call
// runs the grant path and writes.
var redisPeers = []struct {
	name string
	make func(b *testing.B, c *redis.Client) func(ctx context.Context, key string) (bool, error)
}{
	{"floodgate", func(b *testing.B, c *redis.Client) func(context.Context, string) (bool, error) {
		// FailClosed: a call Redis failed is a denial, which benchRedis
		// reports, rather than a local grant that would hide it.
		l, err := redislimit.New(c, redislimit.Config{Rule: floodgate.Rule{Limit: 1_000_000_000, Period: 1000 * time.Second},
			Timeout: time.Second, FailureMode: redislimit.FailClosed})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) (bool, error) {
			d, err := l.Allow(ctx, key)
			return d.Allowed, err
		}
	}},
	{"redis_rate", func(b *testing.B, c *redis.Client) func(context.Context, string) (bool, error) {
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: 1000 * time.Second}
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, key, limit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}
	}},
}

// BenchmarkRedis runs each Redis-backed limiter on one redis-server that
// it starts on loopback, with 1, 8 and 64 goroutines checking random keys
// of 1,000. It reports ns/op as wall time per check (so checks/s is
// 1e9 ÷ it), the p50 and p99 of one check's latency, and the server's own
// cost per call from INFO commandstats (usec_per_call of EVALSHA, reset
// before each run). Without redis-server it skips, with a message.
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
	for _, peer := range redisPeers {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64, MinIdleConns: 64})
		b.Cleanup(func() { c.Close() })
		check := peer.make(b, c)
		for _, k := range keys { // every key exists before the timed runs
			if _, err := check(context.Background(), k); err != nil {
				b.Fatal(err)
			}
		}
		for _, g := range []int{1, 8, 64} {
			b.Run("impl="+peer.name+"/scenario=1K-keys/g="+strconv.Itoa(g), func(b *testing.B) {
				if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				benchRedis(b, g, check, keys)
				us, err := evalshaMicros(admin)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(us, "server-us/call")
			})
		}
	}
}

// benchRedis runs g goroutines of checks for the bench time and reports
// the latency percentiles of the checks beside timed's figures.
func benchRedis(b *testing.B, g int, check func(context.Context, string) (bool, error), keys []string) {
	var (
		mu      sync.Mutex
		samples []time.Duration
		failed  atomic.Value
	)
	hrtime.Count(1).ApproxDuration()
	timed(b, g, func(stop *atomic.Bool) int {
		ctx := context.Background()
		var mine []time.Duration
		n := 0
		for !stop.Load() {
			k := keys[rand.IntN(len(keys))]
			start := hrtime.TSC()
			ok, err := check(ctx, k)
			mine = append(mine, hrtime.TSCSince(start).ApproxDuration())
			if err != nil || !ok {
				failed.Store(fmt.Sprintf("a check failed or was denied: %v", err))
				break
			}
			n++
		}
		mu.Lock()
		samples = append(samples, mine...)
		mu.Unlock()
		return n
	})
	if msg := failed.Load(); msg != nil {
		b.Fatal(msg)
	}
	h := hrtime.NewDurationHistogram(samples, &hrtime.HistogramOptions{BinCount: 1})
	b.ReportMetric(h.P50, "p50-ns")
	b.ReportMetric(h.P99, "p99-ns")
}

// evalshaMicros reads the server's mean time per EVALSHA since the last
// CONFIG RESETSTAT.
func evalshaMicros(c *redis.Client) (float64, error) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, fmt.Errorf("no cmdstat_evalsha in INFO commandstats:\n%s", info)
}
