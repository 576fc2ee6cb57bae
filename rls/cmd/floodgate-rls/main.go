// Command floodgate-rls is Envoy's rate-limit service on floodgate, a
// drop-in for envoyproxy/ratelimit: it reads that server's settings from
// the environment and its YAML configuration from the same runtime
// directory, and serves the same endpoints:
//
//   - gRPC on GRPC_HOST:GRPC_PORT (0.0.0.0:8081):
//     envoy.service.ratelimit.v3.RateLimitService and the gRPC health
//     service (service "ratelimit", and "");
//   - HTTP on HOST:PORT (0.0.0.0:8080): GET /healthcheck (200 "OK", or
//     500 while unhealthy) and POST /json;
//   - HTTP on DEBUG_HOST:DEBUG_PORT (0.0.0.0:6070): GET /metrics
//     (Prometheus), also on PROMETHEUS_ADDR and PROMETHEUS_PATH with
//     USE_PROMETHEUS=true, and Go's profiles under /debug/pprof/, as
//     envoyproxy/ratelimit serves them there. The series are named as
//     its Prometheus mapping, and Envoy Gateway's, name them: each
//     rule's ratelimit_service_rate_limit_* by domain, key1 and key2,
//     ratelimit_service_total_requests and
//     ratelimit_service_response_time_seconds by grpc_method, and the
//     configuration's loads; PROMETHEUS_MAPPER_YAML is not read.
//
// With CONFIG_TYPE=GRPC_XDS_SOTW, as Envoy Gateway sets it, the
// configuration comes from an xDS server instead (go-control-plane's
// state-of-the-world ADS client, at CONFIG_GRPC_XDS_SERVER_URL, as node
// CONFIG_GRPC_XDS_NODE_ID with CONFIG_GRPC_XDS_NODE_METADATA's key=value
// pairs, sending CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS; over TLS with
// CONFIG_GRPC_XDS_SERVER_USE_TLS and its CLIENT_TLS_CERT, CLIENT_TLS_KEY,
// SERVER_TLS_CACERT and SERVER_TLS_SAN, the files read again when they
// change, as the server's are; XDS_CLIENT_BACKOFF_* space the
// attempts after the stream breaks, and XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES
// bounds the bytes of a push that gRPC reads, FLOODGATE_CONFIG_MAX_BYTES
// when unset). Each push is the whole configuration, one
// RateLimitConfig a file, applied as a file reload is (no key gains
// allowance) and ACKed once in force; one that does not load is NACKed
// with the reason, and the configuration before stays. Every push is
// answered: one not in force FLOODGATE_CONFIG_LOAD_TIMEOUT (8 s) after it
// came is NACKed then, and one too large to read is NACKed by the next
// stream. Nothing listens
// before the first push, unless FORCE_START_WITHOUT_INITIAL_CONFIG: then
// the service answers OK with no limit, and is unhealthy, until the
// first push is in force.
//
// TRACING_ENABLED=true makes each gRPC call, and each call of POST
// /json, a server span (a child of the caller's, from W3C trace context
// in its metadata or headers), sent through the OpenTelemetry
// SDK to the OTLP endpoint that OTEL_EXPORTER_OTLP_ENDPOINT and the
// other OTEL_EXPORTER_OTLP_* variables name, over TRACING_EXPORTER_PROTOCOL
// (http, the default, or grpc), with TRACING_SERVICE_NAME (RateLimit),
// TRACING_SERVICE_NAMESPACE and TRACING_SERVICE_INSTANCE_ID (a random
// UUID when unset) as its resource, TRACING_SAMPLING_RATE of the traces
// that no caller sampled (1: all).
//
// QUOTA_MODE=true puts every rule in quota mode, as a descriptor's
// quota_mode does: over its limit, the descriptor is answered OK with
// nothing left, and the request is not refused for it.
// RESPONSE_DYNAMIC_METADATA=true adds to every response the dynamic
// metadata that envoyproxy/ratelimit adds (the domain, the descriptors,
// the hits, and the descriptors over a limit in quota mode).
//
// MERGE_DOMAIN_CONFIG=true lets a domain be in several files, or
// several resources of a push: their descriptors are merged, and one
// that two of them put at the same place is an error, as in one file.
//
// With GRPC_SERVER_USE_TLS=true, gRPC is served over TLS with the
// certificate and key in GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY.
// A CA in GRPC_CLIENT_TLS_CACERT (envoyproxy/ratelimit's name) or
// GRPC_SERVER_TLS_CA_CERT (the name Envoy Gateway sets; both may be
// given) makes every client present a certificate that the CA signed,
// and GRPC_CLIENT_TLS_SAN, one that also names it as a DNS name. The
// files are read again when they change (at most once a second, on a
// new connection's handshake), so a rotation needs no restart and drops
// no call; files that do not load together keep the ones before.
//
// The configuration is every file below
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
// (/srv/runtime_data/current/config), read again within a second of a
// change or of the root's link being swapped; a file that fails to load
// keeps the configuration before it, and counts config_load_error.
// A configuration, from files or a push, may hold at most
// FLOODGATE_CONFIG_MAX_BYTES (128 MiB when unset) of YAML,
// FLOODGATE_CONFIG_MAX_RULES rules (1,000,000), and what it keeps in
// memory at most FLOODGATE_CONFIG_MAX_MEMORY bytes (128 MiB), and its
// descriptors nest at most 32 deep: what it costs to load is a small
// multiple of its size, and a push past a bound is refused before any
// of it is made.
//
// With no REDIS_URL, and no BACKEND_TYPE=memcache, the limits are kept
// in this process: exact on one replica. With REDIS_URL (REDIS_SOCKET_TYPE unix, the default, or tcp;
// REDIS_TYPE SINGLE or CLUSTER, whose REDIS_URL lists nodes separated by
// commas, or SENTINEL, whose REDIS_URL is the master's name and then the
// Sentinels, and REDIS_SENTINEL_AUTH their password or user:password;
// REDIS_AUTH as password or user:password; REDIS_TLS and its
// certificates; REDIS_POOL_SIZE), they are kept on Redis, shared by
// every replica: floodgate's keys, under CACHE_KEY_PREFIX (floodgate-rls
// when unset), every key of a domain in one Cluster slot. floodgate's
// own settings: FLOODGATE_LEASE_MAX=N, lease mode (a request spends
// units of batches leased from Redis, with no round trip, while each of
// its descriptors holds one; 0 or
// unset: a round trip per request); FLOODGATE_FAILURE_MODE, what a
// request gets while Redis cannot answer: error (the default, as
// envoyproxy/ratelimit: the call fails, DeadlineExceeded when Redis
// stalled, else Unknown, and Envoy's failure_mode_deny decides), open
// (OK), closed (OVER_LIMIT) or local (each replica decides by the rule
// alone); FLOODGATE_REDIS_TIMEOUT, the time a decision waits for Redis
// (100ms when unset; a request waits it once, whatever its calls).
//
// With BACKEND_TYPE=memcache, they are kept on memcached instead, shared
// by every replica and exact (compare-and-swap, never a count read and
// written apart), on every algorithm: at MEMCACHE_HOST_PORT, servers
// host:port separated by commas, or at the servers that the SRV name
// MEMCACHE_SRV (_service._proto.name) resolves to, sorted, resolved
// again every MEMCACHE_SRV_REFRESH (0, the default: never; a refresh
// that fails keeps the servers before it), one of the two and not both;
// MEMCACHE_MAX_IDLE_CONNS idle connections kept per server (2, as
// envoyproxy/ratelimit); MEMCACHE_TLS and its certificates, as
// envoyproxy/ratelimit reads them, each server's certificate verified
// for the name it is listed or found under (the chain alone with
// MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION). Keys are under
// CACHE_KEY_PREFIX, as on Redis; FLOODGATE_FAILURE_MODE answers while
// memcached cannot, as on Redis, and FLOODGATE_MEMCACHE_TIMEOUT is the
// time a decision waits for it (100ms when unset), each round trip's
// read and write too. memcached has no lease mode: FLOODGATE_LEASE_MAX
// other than 0 stops the start. A memcached restarted forgets its
// counts, so every key starts its window afresh.
//
// A setting that would make envoyproxy/ratelimit decide otherwise and
// that floodgate-rls does not implement (CONFIG_TYPE other than FILE or
// GRPC_XDS_SOTW, BACKEND_TYPE other than redis or memcache, the
// per-second Redis) stops it at start, with a message that says so;
// one that has no meaning here (USE_STATSD, the pool and pipeline
// tuning of its Redis client) is named in a warning and ignored.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/memcachelimit"
	"github.com/floodgate-go/floodgate/prommetrics"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// main serves until SIGTERM or an interrupt, and exits 1 with the error
// if the settings, the first configuration or a server fails.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "floodgate-rls:", err)
		os.Exit(1)
	}
}

// addrs are the addresses the servers listen on, for tests that ask for
// port 0.
type addrs struct{ grpc, http, debug string }

// run serves until ctx ends, then stops the servers gracefully. ready, if
// not nil, is called once every server listens.
//
// The first configuration is loaded before anything serves; the watcher
// starts once the Server exists, and applies each change after it. On
// the way out, the order matters: the servers finish what they hold,
// then the watcher stops (a change it applied later would find the
// Server closed), then the Server closes (its policies return their
// leases to Redis), and last the Redis client closes.
func run(ctx context.Context, getenv func(string) string, logw io.Writer, ready func(addrs)) error {
	set, err := readSettings(getenv)
	if err != nil {
		return err
	}
	log := set.logger(logw)
	for _, w := range set.warnings {
		log.Warn(w)
	}

	dir := set.configDir()
	var initial *rls.Config
	var sum [sha256.Size]byte
	var firstErr error
	if set.xds != nil {
		initial, _ = rls.LoadOptions{}.Load(nil) // until the first push
		dir = "xds://" + set.xds.url
	} else if initial, sum, firstErr = loadDir(set.load, dir, set.ignoreDot); firstErr != nil {
		if !set.forceStart {
			return fmt.Errorf("configuration in %s: %w (FORCE_START_WITHOUT_INITIAL_CONFIG=true starts without one)", dir, firstErr)
		}
		initial, _ = rls.LoadOptions{}.Load(nil)
	}
	var store *redislimit.Store
	if set.redis != nil {
		client := set.redis.client()
		defer client.Close() // after the Server's Close, which returns its leases through it
		if store, err = redislimit.NewStore(client, set.redis.store); err != nil {
			return err
		}
		// After the Server's Close (deferred later, so run sooner), and
		// before the client's: it stops the Store's bookkeeper and
		// returns what is still leased.
		defer func() {
			if err := store.Close(); err != nil {
				log.Error("closing the Redis store", "err", err)
			}
		}()
		set.options.Store = store
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := client.Ping(ctx).Err(); err != nil {
			log.Warn("Redis does not answer yet: until it does, the failure mode answers", "redis", set.redis.addrs, "err", err)
		}
		cancel()
		log.Info("limits on Redis", "redis", set.redis.addrs, "cluster", set.redis.cluster, "sentinel_master", set.redis.master, "lease_max", set.redis.store.Lease.Max)
	}
	var mstore *memcachelimit.Store
	if set.memcache != nil {
		var closeStore func()
		if mstore, closeStore, err = set.memcache.start(log); err != nil {
			return err
		}
		defer closeStore() // after the Server's Close, deferred later
		set.options.Store = mstore
	}
	srv, err := rls.New(initial, set.options)
	if err != nil {
		return err
	}
	defer func() {
		if err := srv.Close(); err != nil {
			log.Error("closing the rate-limit service", "err", err)
		}
		if testClosed != nil {
			testClosed()
		}
	}()
	healthy := &healthState{grpc: health.NewServer(), needConfig: set.healthyWithConfig, needLoad: set.xds != nil}
	w := &watcher{dir: dir, ignoreDot: set.ignoreDot, load: set.load, srv: srv, healthy: healthy, log: log, firstSum: sum, firstErr: firstErr}
	switch {
	case set.xds != nil:
		// Each push replaces the configuration through the watcher's
		// path; health waits for the first.
		stopXDS, first, err := startXDS(set.xds, w, log)
		if err != nil {
			return err
		}
		defer stopXDS() // before the Server's Close, deferred above, runs
		if !set.forceStart {
			// As envoyproxy/ratelimit: nothing listens before the first
			// configuration.
			log.Info("waiting for the first configuration", "xds", set.xds.url)
			select {
			case <-first:
			case <-ctx.Done():
				return nil
			}
		}
	case firstErr != nil:
		srv.ConfigFailed(firstErr)
		log.Error("starting without a configuration", "dir", dir, "err", firstErr)
	default:
		healthy.configLoaded(initial.Domains() > 0)
		log.Info("configuration loaded", "domains", initial.Domains(), "rules", initial.Rules())
	}
	if set.xds == nil {
		stopWatch := w.start()
		defer stopWatch() // before the Server's Close, deferred above, runs
	}

	// gRPC: the service and health.
	// Stream workers: a request is served on a goroutine kept for the
	// next, whose stack has grown already, instead of a new one; a new
	// goroutine's stack growth took a sixth of the server's CPU.
	reg := prometheus.NewRegistry()
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: set.maxConnAge, MaxConnectionAgeGrace: set.maxConnAgeGrace}),
		grpc.NumStreamWorkers(uint32(16 * runtime.GOMAXPROCS(0))),
		grpc.ChainUnaryInterceptor(newGRPCMetrics(reg).unary),
	}
	if set.grpcTLS != nil {
		st, err := newServerTLS(*set.grpcTLS, tlsCheckEvery, log)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(serverCreds(st))))
		log.Info("gRPC over TLS", "cert", set.grpcTLS.cert, "client_cas", set.grpcTLS.cas, "client_san", set.grpcTLS.san)
	}
	jsonHandler := srv.JSONHandler()
	if set.tracing != nil {
		tp, err := set.tracing.start(ctx)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn("tracing: the last spans were not sent", "err", err)
			}
		}()
		// Outermost: the span covers what the other interceptors do.
		opts = append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(traceUnary(tp))}, opts...)
		jsonHandler = traceJSON(tp, jsonHandler)
		log.Info("tracing", "protocol", set.tracing.protocol, "service", set.tracing.service, "namespace", set.tracing.namespace,
			"instance", set.tracing.instance, "sampling_rate", set.tracing.rate)
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(gs, srv)
	healthpb.RegisterHealthServer(gs, healthy.grpc)
	healthy.set()

	reg.MustRegister(srv.Collector())
	fc := prommetrics.New()
	if err := fc.Add("rls", srv); err != nil {
		return err
	}
	if store != nil {
		if err := fc.Add("redis", store); err != nil {
			return err
		}
	}
	if mstore != nil {
		if err := fc.Add("memcache", mstore); err != nil {
			return err
		}
	}
	reg.MustRegister(fc)
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	mux := http.NewServeMux()
	mux.Handle("/healthcheck", healthy)
	mux.Handle("/json", jsonHandler)
	debug := http.NewServeMux()
	debug.Handle("/metrics", metrics)
	debug.HandleFunc("/debug/pprof/", pprof.Index)
	debug.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	debug.HandleFunc("/debug/pprof/profile", pprof.Profile)
	debug.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	debug.HandleFunc("/debug/pprof/trace", pprof.Trace)

	type listener struct {
		addr  string
		serve func(net.Listener) error
		stop  func()
		ln    net.Listener
	}
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	debugSrv := &http.Server{Handler: debug, ReadHeaderTimeout: 10 * time.Second}
	ls := []*listener{
		{addr: net.JoinHostPort(set.grpcHost, set.grpcPort), serve: gs.Serve, stop: gs.GracefulStop},
		{addr: net.JoinHostPort(set.host, set.port), serve: httpSrv.Serve, stop: func() { httpSrv.Shutdown(context.Background()) }},
		{addr: net.JoinHostPort(set.debugHost, set.debugPort), serve: debugSrv.Serve, stop: func() { debugSrv.Shutdown(context.Background()) }},
	}
	if set.promAddr != "" {
		pm := http.NewServeMux()
		pm.Handle(set.promPath, metrics)
		ps := &http.Server{Handler: pm, ReadHeaderTimeout: 10 * time.Second}
		ls = append(ls, &listener{addr: set.promAddr, serve: ps.Serve, stop: func() { ps.Shutdown(context.Background()) }})
	}
	for _, l := range ls {
		if l.ln, err = net.Listen("tcp", l.addr); err != nil {
			for _, o := range ls {
				if o.ln != nil {
					o.ln.Close()
				}
			}
			return err
		}
	}
	errs := make(chan error, len(ls))
	for _, l := range ls {
		go func() {
			if err := l.serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				errs <- err
			}
		}()
	}
	log.Info("serving", "grpc", ls[0].ln.Addr().String(), "http", ls[1].ln.Addr().String(), "debug", ls[2].ln.Addr().String(), "config", dir)
	if ready != nil {
		ready(addrs{ls[0].ln.Addr().String(), ls[1].ln.Addr().String(), ls[2].ln.Addr().String()})
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errs:
	}
	// Draining: health says so first, so that Envoy and the load
	// balancer stop sending, then the servers finish what they hold.
	healthy.stopping()
	for _, l := range ls {
		l.stop()
	}
	return err
}

// testTicks and testClosed are the tests' seams, nil in the binary, and
// read by run only as it starts and stops. testTicks makes the watcher's
// ticks, and returns what stops them, in place of a ticker's every
// 250 ms; testClosed is called once the Server is closed.
var (
	testTicks  func() (ticks <-chan time.Time, stop func())
	testClosed func()
)

// tlsCheckEvery is how often, at most, a TLS handshake checks whether
// the gRPC server's certificate, key or CA files changed. Tests set it
// to 0, so that every handshake checks.
var tlsCheckEvery = time.Second

// watcher applies to a Server each change to the runtime directory after
// the first configuration, which run loaded before building the Server.
type watcher struct {
	dir       string
	ignoreDot bool
	load      rls.LoadOptions // MERGE_DOMAIN_CONFIG, for files and pushes
	srv       *rls.Server
	healthy   *healthState
	log       *slog.Logger

	// What run loaded: the digest of its files, or why it did not load.
	// The watch (rls.LoadOptions.Watch) loads what it finds at once; its
	// first load, if it finds what run did, is not applied again
	// (SetConfig would keep every rule's state, but count a second load
	// and log it).
	firstSum [sha256.Size]byte
	firstErr error
	seenOne  bool // the watch's goroutine alone reads and writes it
}

// start starts watching on a ticker's every 250 ms, which picks a change
// up within a second, and returns the function that stops the watcher
// and returns once it has stopped: no call to the Server follows.
func (w *watcher) start() (stop func()) {
	var ticks <-chan time.Time
	var stopTicks func()
	if testTicks != nil {
		ticks, stopTicks = testTicks()
	} else {
		t := time.NewTicker(250 * time.Millisecond)
		ticks, stopTicks = t.C, t.Stop
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.load.Watch(ctx, w.dir, w.ignoreDot, ticks, w.apply)
	}()
	return func() {
		cancel()
		<-done
		stopTicks()
	}
}

// apply is rls.LoadOptions.Watch's: a configuration loaded, or why not.
func (w *watcher) apply(c *rls.Config, err error) {
	err = nameBound(err)
	if !w.seenOne {
		w.seenOne = true
		if w.sameAsFirst(err) {
			return
		}
	}
	w.set(c, err)
}

// set puts c in force, or counts and logs err, or SetConfig's error,
// and returns it; the configuration before then stays. It is the one
// path of a file reload and of an xDS push.
func (w *watcher) set(c *rls.Config, err error) error {
	return w.setContext(context.Background(), c, err)
}

// setContext is set, stopped when ctx ends before c is in force (see
// rls.Server.SetConfig).
func (w *watcher) setContext(ctx context.Context, c *rls.Config, err error) error {
	if err == nil {
		err = w.srv.SetConfig(ctx, c)
	}
	if err != nil {
		w.srv.ConfigFailed(err)
		w.log.Error("configuration not loaded: the one before stays", "err", err)
		releaseMemory(time.Now())
		return err
	}
	w.healthy.configLoaded(c.Domains() > 0)
	w.log.Info("configuration loaded", "domains", c.Domains(), "rules", c.Rules())
	return nil
}

// lastRelease is when releaseMemory last gave memory back, in Unix
// nanoseconds.
var lastRelease atomic.Int64

// releaseMemory gives the system back the memory that a refused
// configuration took while it was read, so that a bad push leaves no
// replica holding it, at most once every ten seconds: a server that
// pushes bad configurations in a loop costs a collection each time.
func releaseMemory(now time.Time) {
	last := lastRelease.Load()
	if now.UnixNano()-last < int64(10*time.Second) || !lastRelease.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	debug.FreeOSMemory()
}

// sameAsFirst reports whether the watcher's first load, whose error is
// err, found what run loaded: the same error, or files with the same
// digest. It reads the files again, without parsing them, after the
// watcher read them: files that changed meanwhile differ from run's
// (the watcher's load is applied, and the change is loaded at the next
// tick), or changed back to them (the Server holds what they say).
func (w *watcher) sameAsFirst(err error) bool {
	if err != nil || w.firstErr != nil {
		return err != nil && w.firstErr != nil && err.Error() == w.firstErr.Error()
	}
	files, err := readDir(w.load, w.dir, w.ignoreDot)
	return err == nil && digest(files) == w.firstSum
}

// loadDir loads the configuration in dir, as rls.LoadOptions.Watch loads
// it, and returns it with the digest of its files.
func loadDir(o rls.LoadOptions, dir string, ignoreDot bool) (*rls.Config, [sha256.Size]byte, error) {
	files, err := readDir(o, dir, ignoreDot)
	if err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	c, err := o.Load(files)
	return c, digest(files), nameBound(err)
}

// readDir reads the files of the configuration in dir as
// rls.LoadOptions.Watch reads them: the root's link resolved once, so
// that a root swapped meanwhile is read whole, then every file below it
// (rls.LoadOptions.ReadDir).
func readDir(o rls.LoadOptions, dir string, ignoreDot bool) ([]rls.File, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	return o.ReadDir(real, ignoreDot)
}

// digest is a SHA-256 of files: each one's name, quoted, its length and
// its bytes.
func digest(files []rls.File) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%q %d\n", f.Name, len(f.Data))
		h.Write(f.Data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// healthState is the service's health, for gRPC and /healthcheck:
// serving unless stopping, or waiting for a configuration with a domain
// (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
type healthState struct {
	grpc       *health.Server
	mu         sync.Mutex
	needConfig bool
	hasConfig  bool
	needLoad   bool // xDS: serving once a push is in force
	loaded     bool
	draining   bool
	ok         bool
}

// configLoaded records that a configuration loaded, and whether it holds
// a domain.
func (h *healthState) configLoaded(nonEmpty bool) {
	h.mu.Lock()
	h.hasConfig, h.loaded = nonEmpty, true
	h.mu.Unlock()
	h.set()
}

// stopping reports the service unhealthy for good: it is draining.
func (h *healthState) stopping() {
	h.mu.Lock()
	h.draining = true
	h.mu.Unlock()
	h.set()
}

// set works out the health from what was recorded, and tells the gRPC
// health service.
func (h *healthState) set() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ok = !h.draining && (!h.needConfig || h.hasConfig) && (!h.needLoad || h.loaded)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.grpc.SetServingStatus("ratelimit", st)
	h.grpc.SetServingStatus("", st)
}

// ServeHTTP answers /healthcheck: 200 "OK" while healthy, else 500.
func (h *healthState) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	ok := h.ok
	h.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Write([]byte("OK"))
}
