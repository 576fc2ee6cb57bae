package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	fghttp "github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/go-chi/httprate"
	"github.com/loov/hrtime"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ululestdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// discard is a ResponseWriter that keeps headers and drops the body, reset
// between calls, so that the benchmark times the middleware and not a
// recorder.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(s int)           { d.status = s }

// middlewares are the HTTP middlewares compared: none at all, floodgate's
// httplimit, go-chi/httprate and go-limiter's httplimit, each keyed by the
// client's address (RemoteAddr, no proxy) with a rule none of them refuses
// in the benchmark.
var middlewares = []struct {
	name string
	make func(b *testing.B) func(http.Handler) http.Handler
}{
	{"bare", func(*testing.B) func(http.Handler) http.Handler { return bare }},
	{"floodgate", func(b *testing.B) func(http.Handler) http.Handler {
		return floodgateInProcess(b, floodgate.Rule{Limit: 1 << 40, Period: time.Hour})
	}},
	// floodgate's httplimit with its per-route counts switched off (an
	// internal switch users cannot reach): floodgate less this is what
	// counting costs a request.
	{"floodgate-uncounted", func(b *testing.B) func(http.Handler) http.Handler {
		l, err := fghttp.New(testhook.Uncounted(fghttp.Config{Default: []fghttp.Policy{{Name: "default",
			Rule: floodgate.Rule{Limit: 1 << 40, Period: time.Hour}}}}).(fghttp.Config))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l.Handler
	}},
	{"httprate", func(*testing.B) func(http.Handler) http.Handler {
		// As httprate's documentation keys by the peer: its address, /64 for IPv6.
		return httprate.LimitBy(1<<30, time.Hour, func(r *http.Request) (string, error) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			return httprate.CanonicalizeIP(host), err
		})
	}},
	{"golimiter", func(b *testing.B) func(http.Handler) http.Handler {
		store, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close(b.Context()) })
		m, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
		if err != nil {
			b.Fatal(err)
		}
		return m.Handle
	}},
}

// bare is no middleware at all.
func bare(h http.Handler) http.Handler { return h }

// floodgateInProcess is floodgate's httplimit with one policy of rule,
// kept in process.
func floodgateInProcess(b *testing.B, rule floodgate.Rule) func(http.Handler) http.Handler {
	l, err := fghttp.New(fghttp.Config{Default: []fghttp.Policy{{Name: "default", Rule: rule}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l.Handler
}

// clientRequests returns one GET request from each of n clients, each
// with an address of its own (RemoteAddr, no proxy).
func clientRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r, _ := http.NewRequest("GET", "http://example.test/hello", nil)
		r.RemoteAddr = "198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":4711"
		reqs[i] = r
	}
	return reqs
}

// BenchmarkMiddleware times one request through each middleware and a
// handler that writes a short body, from one client or from 1,000, on one
// goroutine: the middleware's overhead is its figure minus bare's. Then
// benchMiddlewareRedis compares the middlewares that keep their limits on
// Redis, with 64 requests at once (scenario=redis-clients-N, g=64).
// Under -headline, neither the uncounted middleware nor, on Redis, the
// routes of two policies and two tiers run.
func BenchmarkMiddleware(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	for _, clients := range []int{1, 1000} {
		reqs := clientRequests(clients)
		for _, m := range middlewares {
			if headlineCuts(m.name, "bare", "floodgate", "httprate", "golimiter") {
				continue
			}
			b.Run("scenario=clients-"+strconv.Itoa(clients)+"/impl="+m.name, func(b *testing.B) {
				h := m.make(b)(ok)
				w := &discard{h: http.Header{}}
				for _, r := range reqs {
					h.ServeHTTP(w, r)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					clear(w.h)
					w.status = 0
					h.ServeHTTP(w, reqs[i%clients])
					i++
				}
				if w.status != 0 && w.status != http.StatusOK {
					b.Fatalf("%s answered %d", m.name, w.status)
				}
			})
		}
	}
	benchMiddlewareRedis(b, ok)
}

// mwRedisG is how many requests the Redis-backed middlewares serve at
// once: 64 goroutines, each with a client connection of its own.
const mwRedisG = 64

// mwRedisRule admits every request of the Redis-backed scenarios, in
// every middleware: a billion per 1,000 s, a bucket of a billion refilled
// at 1 µs a token, the finest step redislimit holds (it refuses 1<<40 an
// hour, whose step is 3.3 ns). ulule counts it in a fixed window of 1,000
// s, throttled as GCRA at 1 µs an emission; the in-process floodgate
// holds the same rule.
var mwRedisRule = floodgate.Rule{Limit: 1_000_000_000, Period: 1000 * time.Second}

// mwRedisHourly is the two-policy route's second policy: 3.6 billion an
// hour, 1 µs a token again, so that both admit everything.
var mwRedisHourly = floodgate.Rule{Limit: 3_600_000_000, Period: time.Hour}

// redisMiddlewares are the middlewares of the Redis-backed scenarios,
// keyed by the client's address like the others: bare and floodgate in
// process, the floors a Redis-backed middleware is read against; then,
// each on a go-redis client of its own with the same options (redis),
// floodgate's httplimit on redislimit.NewStore, a round trip per request,
// in lease mode, a round trip per request for a route of two policies,
// and for two policies in flight at once (two tiers); ulule/limiter's stdlib middleware on its Redis store (a fixed
// window, INCRBY in a script); throttled's HTTPRateLimiterCtx with GCRA on
// its go-redis v9 store (a read, then a compare-and-swap script, retried
// while other requests of the client win it). Every peer that has a Redis
// store working with go-redis v9 is here.
var redisMiddlewares = []struct {
	name  string
	redis bool
	make  func(b *testing.B, c *redis.Client) func(http.Handler) http.Handler
}{
	{"bare", false, func(*testing.B, *redis.Client) func(http.Handler) http.Handler { return bare }},
	{"floodgate", false, func(b *testing.B, _ *redis.Client) func(http.Handler) http.Handler {
		return floodgateInProcess(b, mwRedisRule)
	}},
	{"floodgate-redis", true, func(b *testing.B, c *redis.Client) func(http.Handler) http.Handler {
		return floodgateStore(b, c, "bench-fg-redis", redislimit.Lease{}, fghttp.Policy{Name: "default", Rule: mwRedisRule})
	}},
	// Lease mode with BenchmarkRedis's setting: batches of up to 500,000
	// units, which from a full bucket at 1 µs a token last 500 ms, half
	// the TTL.
	{"floodgate-redis-lease", true, func(b *testing.B, c *redis.Client) func(http.Handler) http.Handler {
		return floodgateStore(b, c, "bench-fg-lease", redisLease, fghttp.Policy{Name: "default", Rule: mwRedisRule})
	}},
	{"floodgate-redis-2policies", true, func(b *testing.B, c *redis.Client) func(http.Handler) http.Handler {
		return floodgateStore(b, c, "bench-fg-2p", redislimit.Lease{},
			fghttp.Policy{Name: "default", Rule: mwRedisRule}, fghttp.Policy{Name: "hourly", Rule: mwRedisHourly})
	}},
	// Calls of two policies in flight at once: every client's request is
	// decided by one policy, that of its tier, and half the clients are
	// in each tier. A Store's calls share one pipeline whatever their
	// policies.
	{"floodgate-redis-2tiers", true, func(b *testing.B, c *redis.Client) func(http.Handler) http.Handler {
		return floodgateStoreConfig(b, c, "bench-fg-2t", redislimit.Lease{}, fghttp.Config{
			Routes: []fghttp.Route{{Pattern: "/", Policies: []fghttp.Policy{{Name: "default", Rule: mwRedisRule}},
				Tiers: map[string][]fghttp.Policy{"odd": {{Name: "odd", Rule: mwRedisRule}}}}},
			Tier: func(r *http.Request, client string) string {
				if client != "" && (client[len(client)-1]-'0')%2 == 1 {
					return "odd"
				}
				return ""
			},
		})
	}},
	{"ulule-redis", true, func(b *testing.B, c *redis.Client) func(http.Handler) http.Handler {
		store, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "bench-ulule", MaxRetry: ulule.DefaultMaxRetry})
		if err != nil {
			b.Fatal(err)
		}
		l := ulule.New(store, ulule.Rate{Limit: mwRedisRule.Limit, Period: mwRedisRule.Period})
		return ululestdlib.NewMiddleware(l).Handler
	}},
	{"throttled-redis", true, func(b *testing.B, c *redis.Client) func(http.Handler) http.Handler {
		store, err := throttledredis.NewCtx(c, "bench-throttled:")
		if err != nil {
			b.Fatal(err)
		}
		l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{
			MaxRate:  throttled.PerDuration(int(mwRedisRule.Limit), mwRedisRule.Period),
			MaxBurst: int(mwRedisRule.Limit) - 1, // throttled admits MaxBurst+1 at once
		})
		if err != nil {
			b.Fatal(err)
		}
		// As throttledLimiter: a user whose requests met "too many
		// failed compare-and-swaps" errors would raise the limit.
		l.SetMaxCASAttemptsLimit(1 << 20)
		m := &throttled.HTTPRateLimiterCtx{RateLimiter: l, VaryBy: &throttled.VaryBy{RemoteAddr: true}}
		return m.RateLimit
	}},
}

// floodgateStore is floodgate's httplimit with policies ps on a
// redislimit.Store on c, its keys under prefix, lease mode as lease says.
// FailClosed: a request Redis failed is refused, which the benchmark
// reports, rather than decided in process, which would hide it. Timeout
// 10 s: a loaded machine's stall is no failure of Redis (with 1 s, one
// lease-mode run in six under make bench saw a request refused while its
// key's refill waited).
func floodgateStore(b *testing.B, c *redis.Client, prefix string, lease redislimit.Lease, ps ...fghttp.Policy) func(http.Handler) http.Handler {
	return floodgateStoreConfig(b, c, prefix, lease, fghttp.Config{Default: ps})
}

// floodgateStoreConfig is floodgateStore with the middleware's routes
// and policies as cfg gives them.
func floodgateStoreConfig(b *testing.B, c *redis.Client, prefix string, lease redislimit.Lease, cfg fghttp.Config) func(http.Handler) http.Handler {
	store, err := redislimit.NewStore(c, redislimit.Config{Prefix: prefix, Timeout: 10 * time.Second, FailureMode: redislimit.FailClosed, Lease: lease})
	if err != nil {
		b.Fatal(err)
	}
	cfg.Store = store
	l, err := fghttp.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := l.Close(); err != nil {
			b.Error(err)
		}
		if err := store.Close(); err != nil {
			b.Error(err)
		}
	})
	return l.Handler
}

// roundTrips counts a go-redis client's round trips: each command sent
// alone (a script's EVALSHA, and its EVAL after NOSCRIPT, are two) and
// each pipeline (one write of its commands, one read of their replies).
type roundTrips struct{ n atomic.Int64 }

func (*roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// benchMiddlewareRedis runs each of redisMiddlewares on one redis-server
// that it starts on loopback, with mwRedisG goroutines serving requests
// from random clients of 1 or 1,000, every one admitted. Each middleware
// is built for its figure and closed after it. Before the figure every
// client makes one request, then the same goroutines serve for 200 ms
// untimed, and lease mode a TTL longer: the batches the first requests
// took all at once are then renewed, each as its client's requests ask,
// and the figure sees leases in their steady state rather than that first
// wave's end.
//
// It reports ns/op as wall time per request, the p50, p99 and p99.9 of
// one request's latency, rt/req, the round trips the middleware's client
// made per request (background ones included: lease renewals and
// returns), and from INFO commandstats (reset before the figure)
// scripts/req, the scripts Redis ran per request, and cmds/req, every
// command it ran per request, those the scripts called included (a
// pipeline of two is two commands in one round trip). Without
// redis-server it runs none of them, and says so, unless
// FLOODGATE_REQUIRE_REDIS=1.
func benchMiddlewareRedis(b *testing.B, ok http.Handler) {
	if _, err := redistest.Find(); err != nil && os.Getenv(redistest.Require) != "1" {
		b.Logf("no Redis-backed middleware scenarios: %v", err)
		return
	}
	srv := redistest.Start(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { admin.Close() })
	for _, clients := range []int{1, 1000} {
		reqs := clientRequests(clients)
		for _, m := range redisMiddlewares {
			if headlineCuts(m.name, "bare", "floodgate", "floodgate-redis", "floodgate-redis-lease", "ulule-redis", "throttled-redis") {
				continue
			}
			b.Run("scenario=redis-clients-"+strconv.Itoa(clients)+"/impl="+m.name+"/g="+strconv.Itoa(mwRedisG), func(b *testing.B) {
				var (
					c  *redis.Client
					rt roundTrips
				)
				if m.redis {
					c = redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: mwRedisG, MinIdleConns: mwRedisG})
					c.AddHook(&rt)
					b.Cleanup(func() { c.Close() })
				}
				h := m.make(b, c)(ok)
				var failed atomic.Value
				serveLoop(h, reqs, &failed, nil, true)(new(atomic.Bool))
				warm := 200 * time.Millisecond
				if m.name == "floodgate-redis-lease" {
					warm += redisLease.TTL
				}
				runFor(mwRedisG, warm, serveLoop(h, reqs, &failed, nil, false))
				if msg := failed.Load(); msg != nil {
					b.Fatalf("%s before the figure: %v", m.name, msg)
				}
				if m.redis {
					if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
						b.Fatal(err)
					}
				}
				before := rt.n.Load()
				served := benchServe(b, mwRedisG, h, reqs)
				b.ReportMetric(float64(rt.n.Load()-before)/float64(served), "rt/req")
				if m.redis {
					info, err := admin.Info(context.Background(), "commandstats").Result()
					if err != nil {
						b.Fatal(err)
					}
					cmds, scripts, err := commandCalls(info)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(cmds/float64(served), "cmds/req")
					b.ReportMetric(scripts/float64(served), "scripts/req")
				}
			})
		}
	}
}

// serveLoop is one goroutine's work: requests from random clients of
// reqs through h until stop (or each client's once, in order, if every),
// each timed into record's samples when record is not nil. A request
// answered with anything but the handler's own 200 is stored in failed,
// and ends the loop.
func serveLoop(h http.Handler, reqs []*http.Request, failed *atomic.Value, record func([]time.Duration), every bool) func(*atomic.Bool) int {
	return func(stop *atomic.Bool) int {
		w := &discard{h: http.Header{}}
		var all []time.Duration
		n := 0
		for !stop.Load() && (!every || n < len(reqs)) {
			r := reqs[n%len(reqs)]
			if !every {
				r = reqs[rand.IntN(len(reqs))]
			}
			clear(w.h)
			w.status = 0
			start := stampNow()
			h.ServeHTTP(w, r)
			if record != nil {
				all = append(all, start.since().duration())
			}
			if w.status != 0 && w.status != http.StatusOK {
				failed.Store(fmt.Sprintf("a request from %s was answered %d", r.RemoteAddr, w.status))
				break
			}
			n++
		}
		if record != nil {
			record(all)
		}
		return n
	}
}

// benchServe runs g goroutines of requests for the bench time, reports
// the latency percentiles of the requests, and returns how many it
// counted.
func benchServe(b *testing.B, g int, h http.Handler, reqs []*http.Request) int {
	var (
		mu     sync.Mutex
		all    []time.Duration
		failed atomic.Value
	)
	calibrateStamps()
	served := timed(b, g, serveLoop(h, reqs, &failed, func(a []time.Duration) {
		mu.Lock()
		all = append(all, a...)
		mu.Unlock()
	}, false))
	if msg := failed.Load(); msg != nil {
		b.Fatal(msg)
	}
	hist := hrtime.NewDurationHistogram(all, &hrtime.HistogramOptions{BinCount: 1})
	b.ReportMetric(hist.P50, "p50-ns")
	b.ReportMetric(hist.P99, "p99-ns")
	b.ReportMetric(hist.P999, "p99.9-ns")
	return served
}

// commandCalls reads the text of INFO commandstats: the calls of every
// command but CONFIG and INFO (the benchmark's own), those that scripts
// made included, and of those the scripts run (EVALSHA, EVAL, FCALL).
// Redis 7 names a subcommand's line by both names, as
// cmdstat_config|resetstat.
func commandCalls(info string) (cmds, scripts float64, err error) {
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		cmd, _, _ := strings.Cut(name, "|")
		if cmd == "config" || cmd == "info" {
			continue
		}
		calls, ok := strings.CutPrefix(fields, "calls=")
		if !ok {
			return 0, 0, fmt.Errorf("cmdstat_%s in INFO commandstats does not begin with calls: %q", name, line)
		}
		calls, _, _ = strings.Cut(calls, ",")
		v, err := strconv.ParseFloat(calls, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("cmdstat_%s's calls in INFO commandstats: %w", name, err)
		}
		cmds += v
		switch cmd {
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
			scripts += v
		}
	}
	return cmds, scripts, nil
}
