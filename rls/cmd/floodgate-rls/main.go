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
//     envoyproxy/ratelimit serves them there.
//
// The configuration is every file below
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
// (/srv/runtime_data/current/config), read again within a second of a
// change or of the root's link being swapped; a file that fails to load
// keeps the configuration before it, and counts config_load_error.
//
// With no REDIS_URL, the limits are kept in this process: exact on one
// replica. With REDIS_URL (REDIS_SOCKET_TYPE unix, the default, or tcp;
// REDIS_TYPE SINGLE or CLUSTER, whose REDIS_URL lists nodes separated by
// commas; REDIS_AUTH as password or user:password; REDIS_TLS and its
// certificates; REDIS_POOL_SIZE), they are kept on Redis, shared by
// every replica: floodgate's keys, under CACHE_KEY_PREFIX (floodgate-rls
// when unset), every key of a domain in one Cluster slot. floodgate's
// own settings: FLOODGATE_LEASE_MAX=N, lease mode (a request spends
// units of batches leased from Redis, with no round trip, while each of
// its descriptors holds one; 0 or
// unset: a round trip per request); FLOODGATE_FAILURE_MODE, what a
// request gets while Redis cannot answer: open (the default: OK, as
// Envoy's failure_mode_deny: false lets a request through when the
// service fails), closed (OVER_LIMIT) or local (each replica decides by
// the rule alone); FLOODGATE_REDIS_TIMEOUT, the time a decision waits
// for Redis. A setting that would make envoyproxy/ratelimit decide
// otherwise and that floodgate-rls does not implement (QUOTA_MODE,
// RESPONSE_DYNAMIC_METADATA, MERGE_DOMAIN_CONFIG, CONFIG_TYPE other than
// FILE, BACKEND_TYPE memcache, the per-second Redis) stops it at start,
// with a message that says so; one that has no meaning here (USE_STATSD,
// tracing, the pool and pipeline tuning of its Redis client) is named in
// a warning and ignored.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/prommetrics"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/rls/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

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
	ticks := time.NewTicker(250 * time.Millisecond)
	defer ticks.Stop()
	first := make(chan error, 1)
	var srv *rls.Server
	var once sync.Once
	healthy := &healthState{grpc: health.NewServer(), needConfig: set.healthyWithConfig}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	defer func() { stopWatch(); <-watched }()
	var initial *config.Config
	apply := func(c *config.Config, err error) {
		isFirst := false
		once.Do(func() {
			initial, isFirst = c, true
			first <- err
		})
		if isFirst { // the first load, before the server exists
			return
		}
		if err != nil {
			srv.ConfigFailed(err)
			log.Error("configuration not loaded: the one before stays", "err", err)
			return
		}
		if err := srv.SetConfig(c); err != nil {
			srv.ConfigFailed(err)
			log.Error("configuration not loaded: the one before stays", "err", err)
			return
		}
		healthy.configLoaded(c.Domains() > 0)
		log.Info("configuration loaded", "domains", c.Domains(), "rules", c.Len())
	}
	// The watcher applies the first load before the Server exists; it
	// waits for srv below before it looks again.
	srvReady := make(chan struct{})
	go func() {
		defer close(watched)
		ticked := make(chan time.Time)
		go func() {
			<-srvReady
			for {
				select {
				case t := <-ticks.C:
					select {
					case ticked <- t:
					case <-watchCtx.Done():
						return
					}
				case <-watchCtx.Done():
					return
				}
			}
		}()
		config.Watch(watchCtx, dir, set.ignoreDot, ticked, apply)
	}()
	firstErr := <-first
	if firstErr != nil && !set.forceStart {
		close(srvReady)
		return fmt.Errorf("configuration in %s: %w (FORCE_START_WITHOUT_INITIAL_CONFIG=true starts without one)", dir, firstErr)
	}
	if initial == nil {
		initial, _ = config.Load(nil)
	}
	var store *redislimit.Store
	if set.redis != nil {
		client := set.redis.client()
		defer client.Close()
		if store, err = redislimit.NewStore(client, set.redis.store); err != nil {
			close(srvReady)
			return err
		}
		set.options.Store = store
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := client.Ping(ctx).Err(); err != nil {
			log.Warn("Redis does not answer yet: until it does, the failure mode answers", "redis", set.redis.addrs, "err", err)
		}
		cancel()
		log.Info("limits on Redis", "redis", set.redis.addrs, "cluster", set.redis.cluster, "lease_max", set.redis.store.Lease.Max)
	}
	srv, err = rls.New(initial, set.options)
	if err != nil {
		close(srvReady)
		return err
	}
	defer srv.Close()
	if firstErr != nil {
		srv.ConfigFailed(firstErr)
		log.Error("starting without a configuration", "dir", dir, "err", firstErr)
	} else {
		healthy.configLoaded(initial.Domains() > 0)
		log.Info("configuration loaded", "domains", initial.Domains(), "rules", initial.Len())
	}
	close(srvReady)

	// gRPC: the service and health.
	// Stream workers: a request is served on a goroutine kept for the
	// next, whose stack has grown already, instead of a new one; a new
	// goroutine's stack growth took a sixth of the server's CPU.
	gs := grpc.NewServer(grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: set.maxConnAge, MaxConnectionAgeGrace: set.maxConnAgeGrace}),
		grpc.NumStreamWorkers(uint32(16*runtime.GOMAXPROCS(0))))
	pb.RegisterRateLimitServiceServer(gs, srv)
	healthpb.RegisterHealthServer(gs, healthy.grpc)
	healthy.set()

	reg := prometheus.NewRegistry()
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
	reg.MustRegister(fc)
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	mux := http.NewServeMux()
	mux.Handle("/healthcheck", healthy)
	mux.Handle("/json", srv.JSONHandler())
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

// healthState is the service's health, for gRPC and /healthcheck:
// serving unless stopping, or waiting for a configuration with a domain
// (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
type healthState struct {
	grpc       *health.Server
	mu         sync.Mutex
	needConfig bool
	hasConfig  bool
	draining   bool
	ok         bool
}

func (h *healthState) configLoaded(nonEmpty bool) {
	h.mu.Lock()
	h.hasConfig = nonEmpty
	h.mu.Unlock()
	h.set()
}

func (h *healthState) stopping() {
	h.mu.Lock()
	h.draining = true
	h.mu.Unlock()
	h.set()
}

func (h *healthState) set() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ok = !h.draining && (!h.needConfig || h.hasConfig)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.grpc.SetServingStatus("ratelimit", st)
	h.grpc.SetServingStatus("", st)
}

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
