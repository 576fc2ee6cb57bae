package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memcachelimit"
	"github.com/floodgate-go/floodgate/prommetrics"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// options are the server's flags.
type options struct {
	addr         string
	limit        int64
	period       time.Duration
	trusted      string
	v6           int
	metrics      string
	redis        string
	memcache     string
	leaseMax     int64
	redisTimeout time.Duration
	redisFailure string
	budget       int64
	inflight     int
	slotTTL      time.Duration
	leaseSlots   int
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on; port 0 picks a free one")
	flag.Int64Var(&o.limit, "limit", 5, "requests per period per client, for each endpoint")
	flag.DurationVar(&o.period, "period", time.Minute, "the period of -limit")
	flag.StringVar(&o.trusted, "trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
	flag.IntVar(&o.v6, "ipv6-prefix", 64, "IPv6 clients are grouped by this prefix length")
	flag.StringVar(&o.metrics, "metrics", "", "address to serve GET /metrics on (Prometheus); empty for none")
	flag.StringVar(&o.redis, "redis", "", "HOST:PORT of a Redis server that keeps the limits, shared by every replica that names it; empty keeps them in this process")
	flag.StringVar(&o.memcache, "memcache", "", "HOST:PORT of a memcached that keeps the limits instead, shared by every replica that names it (not with -redis)")
	flag.Int64Var(&o.leaseMax, "lease-max", 0, "with -redis, lease mode: the most units a replica takes ahead for one client and endpoint; 0 decides every request on Redis")
	flag.DurationVar(&o.redisTimeout, "redis-timeout", 100*time.Millisecond, "with -redis or -memcache, each request's budget for the server, after which -redis-failure decides it")
	flag.Int64Var(&o.budget, "budget", 0, "a budget of this many units per -period per client on GET /spend?n=K, a response that streams and costs K units, known when it ends; 0 for none")
	flag.IntVar(&o.inflight, "inflight", 0, "at most this many requests per client at once, on every endpoint (with -redis, across every replica); 0 for no such limit")
	flag.DurationVar(&o.slotTTL, "slot-ttl", 0, "with -redis and -inflight, how soon the slots of a replica that dies come back (each replica renews its own every third of it); 0 means 10s")
	flag.IntVar(&o.leaseSlots, "lease-slots", 0, "with -redis and -inflight, the slots of a client a replica leases ahead, 0 to 64, and keeps when its requests end, so that the next take one with no round trip; 0 takes each from Redis")
	flag.StringVar(&o.redisFailure, "redis-failure", "local", "with -redis or -memcache, how a request is decided while the server cannot: local (by this replica alone, on -limit), open (admitted) or closed (refused)")
	flag.Parse()
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

// failureModes are -redis-failure's values.
var failureModes = map[string]redislimit.FailureMode{
	"local":  redislimit.FailLocal,
	"open":   redislimit.FailOpen,
	"closed": redislimit.FailClosed,
}

func run(o options) (err error) {
	var proxies []string
	if o.trusted != "" {
		proxies = strings.Split(o.trusted, ",")
	}
	rule := floodgate.Rule{Limit: o.limit, Period: o.period}
	cfg := httplimit.Config{
		Routes: []httplimit.Route{
			{Pattern: "GET /hello", Policies: []httplimit.Policy{{Name: "hello", Rule: rule}}},
			{Pattern: "GET /other", Policies: []httplimit.Policy{{Name: "other", Rule: rule}}},
			{Pattern: "GET /hold", Policies: []httplimit.Policy{{Name: "hold", Rule: rule}}},
		},
		TrustedProxies: proxies,
		IPv6Prefix:     o.v6,
	}
	switch {
	case o.inflight < 0:
		return fmt.Errorf("-inflight %d: want 0 (none) or more", o.inflight)
	case o.slotTTL != 0 && (o.redis == "" || o.inflight == 0):
		return errors.New("-slot-ttl needs -redis and -inflight")
	case o.leaseSlots != 0 && (o.redis == "" || o.inflight == 0):
		return errors.New("-lease-slots needs -redis and -inflight")
	case o.leaseSlots < 0 || o.leaseSlots > maxLeaseSlots:
		return fmt.Errorf("-lease-slots %d: want 0 (none) to %d slots a replica leases ahead of each client", o.leaseSlots, maxLeaseSlots)
	}
	if o.budget < 0 {
		return fmt.Errorf("-budget %d: want 0 (none) or more", o.budget)
	}
	if o.budget > 0 {
		// A cost known when the response ends: each request is checked
		// against the budget (an estimate of 0), and charged its cost when
		// its handler returns, into debt if it runs past what is left.
		cfg.Routes = append(cfg.Routes, httplimit.Route{Pattern: "GET /spend", Policies: []httplimit.Policy{
			{Name: "budget", Rule: floodgate.Rule{Limit: o.budget, Period: o.period}, After: true}}})
	}
	if o.inflight > 0 {
		// Each endpoint's own: a client's slow requests on one leave the
		// others free. A refusal's Retry-After says when a request of
		// GET /hold's usual length would have ended.
		for i := range cfg.Routes {
			cfg.Routes[i].Policies = append(cfg.Routes[i].Policies,
				httplimit.Policy{Name: "inflight", InFlight: o.inflight, RetryAfter: time.Second})
		}
	}
	if o.redis != "" && o.memcache != "" {
		return errors.New("-redis and -memcache: the limits are kept on one of them, not both")
	}
	var store *redislimit.Store
	var mstore *memcachelimit.Store
	switch {
	case o.memcache != "":
		if mstore, err = memcacheStore(o, &cfg); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, mstore.Close()) }()
	case o.redis == "":
		if o.leaseMax != 0 {
			return errors.New("-lease-max needs -redis")
		}
		// Both memory bounds, set here as a server should (they are also
		// the LocalStore's defaults): clients idle a minute are forgotten
		// (which changes no decision), and each policy holds at most a
		// million (about 64 MiB), whatever a client rotating its address
		// or key sends. Closed after the middleware (deferred earlier, so
		// run later).
		local := floodgate.NewLocalStore(floodgate.LocalStoreConfig{IdleTTL: time.Minute, MaxKeys: 1 << 20})
		defer func() { err = errors.Join(err, local.Close()) }()
		cfg.Store = local
	default:
		mode, ok := failureModes[o.redisFailure]
		if !ok {
			return fmt.Errorf("-redis-failure %q: want local, open or closed", o.redisFailure)
		}
		// ContextTimeoutEnabled lets a request's budget (-redis-timeout)
		// bound its wait for Redis, a pooled connection included.
		client := redis.NewClient(&redis.Options{Addr: o.redis, ContextTimeoutEnabled: true})
		// Closed last, after the middleware has given its leases back
		// through it.
		defer func() { err = errors.Join(err, client.Close()) }()
		// A Redis that cannot be reached at start is a mistake in -redis
		// more often than an outage: say so before listening. Once
		// serving, -redis-failure decides while Redis is away.
		ping, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		perr := client.Ping(ping).Err()
		cancel()
		if perr != nil {
			return fmt.Errorf("-redis %s: %w", o.redis, perr)
		}
		// Redis keeps each client's state with a TTL, so the memory bounds
		// are Redis's business; the FailLocal limiter bounds its own.
		store, err = redislimit.NewStore(client, redislimit.Config{
			Timeout:     o.redisTimeout,
			FailureMode: mode,
			Lease:       redislimit.Lease{Max: o.leaseMax, Slots: o.leaseSlots},
			SlotTTL:     o.slotTTL,
		})
		if err != nil {
			return err
		}
		// After the middleware's Close (deferred later, so run sooner),
		// and before the client's: it stops the Store's bookkeeper.
		defer func() { err = errors.Join(err, store.Close()) }()
		cfg.Store = store
	}
	lim, err := httplimit.New(cfg)
	if err != nil {
		return err
	}
	// On a Store, Close gives back the units leased ahead: it runs once
	// the server has stopped taking requests, and before the client
	// closes (deferred earlier, so run later).
	defer func() { err = errors.Join(err, lim.Close()) }()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s\n", lim.Client(r))
	})
	mux.HandleFunc("GET /other", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "other")
	})
	mux.HandleFunc("GET /hold", hold)
	if o.budget > 0 {
		mux.HandleFunc("GET /spend", spend)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	defer ln.Close() // on an error before Serve, which closes it
	srv := &http.Server{
		Handler: lim.Handler(mux),
		// A client that trickles its headers, or idles on a kept-alive
		// connection, holds a connection and a goroutine: bound both.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	var msrv *http.Server
	var mln net.Listener
	if o.metrics != "" {
		// The counts on a listener of their own, opened before either
		// line is printed, so that a bad -metrics is an error at start.
		c := prommetrics.New()
		if err := c.Add("httpserver", lim); err != nil {
			return err
		}
		if store != nil {
			// The Store counts its round trips, failures and fallbacks
			// itself: the middleware's counts do not include them.
			if err := c.Add("httpserver-redis", store); err != nil {
				return err
			}
		}
		if mstore != nil {
			if err := c.Add("httpserver-memcache", mstore); err != nil {
				return err
			}
		}
		reg := prometheus.NewRegistry()
		if err := reg.Register(c); err != nil {
			return err
		}
		if mln, err = net.Listen("tcp", o.metrics); err != nil {
			return err
		}
		mmux := http.NewServeMux()
		mmux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv = &http.Server{Handler: mmux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	errc := make(chan error, 2)
	if msrv != nil {
		fmt.Printf("metrics on %s\n", mln.Addr())
		go func() { errc <- msrv.Serve(mln) }()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	if msrv != nil {
		err = errors.Join(err, msrv.Shutdown(shutdown))
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// maxLeaseSlots is the most -lease-slots takes: redislimit's bound on
// Lease.Slots.
const maxLeaseSlots = 64

// maxHold is the longest GET /hold holds a request.
const maxHold = time.Minute

// hold answers GET /hold?ms=D with 200 after holding the request D ms (0
// to a minute), or at once if the client goes away first: a slow request,
// to try -inflight with curl. X-Held says when it held, as the wall
// clock's Unix nanoseconds at its start and its end.
func hold(w http.ResponseWriter, r *http.Request) {
	ms, err := strconv.ParseInt(r.URL.Query().Get("ms"), 10, 64)
	if err != nil || ms < 0 || ms > maxHold.Milliseconds() {
		http.Error(w, fmt.Sprintf("ms: want how long to hold the request, 0 to %d", maxHold.Milliseconds()), http.StatusBadRequest)
		return
	}
	start := time.Now()
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		w.Header().Set("X-Held", fmt.Sprintf("%d %d", start.UnixNano(), time.Now().UnixNano()))
		fmt.Fprintf(w, "held %d ms\n", ms)
	case <-r.Context().Done():
	}
}

// spend answers GET /spend?n=K as a model's stream would: in parts, each
// flushed, and reports its cost, K units, only when it ends (as the
// tokens of a reply are known only once it is whole).
func spend(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	if err != nil || n < 0 {
		http.Error(w, "n: want the cost, a whole number of units, 0 or more", http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	for part := 1; part <= 3; part++ {
		fmt.Fprintf(w, "part %d of 3\n", part)
		_ = rc.Flush()
	}
	httplimit.Report(w, n)
	fmt.Fprintf(w, "spent %d\n", n)
}
