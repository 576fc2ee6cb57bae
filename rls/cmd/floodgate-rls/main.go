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
	"crypto/tls"
	"crypto/x509"
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
	"strconv"
	"strings"
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
	"github.com/redis/go-redis/v9"
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

	dir := filepath.Join(set.runtimeRoot, set.runtimeSubdir, set.runtimeAppDir)
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

// settings are envoyproxy/ratelimit's, as this server reads them.
type settings struct {
	host, port, grpcHost, grpcPort, debugHost, debugPort string
	maxConnAge, maxConnAgeGrace                          time.Duration
	promAddr, promPath                                   string
	runtimeRoot, runtimeSubdir, runtimeAppDir            string
	ignoreDot, forceStart, healthyWithConfig             bool
	logLevel                                             slog.Level
	logJSON                                              bool
	options                                              rls.Options
	warnings                                             []string
	redis                                                *redisSettings // nil: the limits are in process
}

// redisSettings are the Redis backend's.
type redisSettings struct {
	cluster  bool
	addrs    []string
	network  string
	user     string
	password string
	tls      *tls.Config
	poolSize int
	dial     time.Duration
	store    redislimit.Config
}

// readSettings reads the environment. Every value is checked: a setting
// that does not parse is an error that names it.
func readSettings(getenv func(string) string) (*settings, error) {
	var errs []error
	str := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	boolean := func(name string, def bool) bool {
		v := getenv(name)
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: not true or false", name, v))
		}
		return b
	}
	port := func(name, def string) string {
		v := str(name, def)
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s=%q: not a port", name, v))
		}
		return v
	}
	duration := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("%s=%q: not a duration", name, v))
		}
		return d
	}
	s := &settings{
		host: str("HOST", "0.0.0.0"), port: port("PORT", "8080"),
		grpcHost: str("GRPC_HOST", "0.0.0.0"), grpcPort: port("GRPC_PORT", "8081"),
		debugHost: str("DEBUG_HOST", "0.0.0.0"), debugPort: port("DEBUG_PORT", "6070"),
		maxConnAge:        duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour),
		maxConnAgeGrace:   duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour),
		runtimeRoot:       str("RUNTIME_ROOT", "/srv/runtime_data/current"),
		runtimeSubdir:     getenv("RUNTIME_SUBDIRECTORY"),
		runtimeAppDir:     str("RUNTIME_APPDIRECTORY", "config"),
		ignoreDot:         boolean("RUNTIME_IGNOREDOTFILES", false),
		forceStart:        boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
		healthyWithConfig: boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),
	}
	boolean("RUNTIME_WATCH_ROOT", true) // either way, the tree is watched whole, links included
	if boolean("USE_PROMETHEUS", false) {
		s.promAddr, s.promPath = str("PROMETHEUS_ADDR", ":9090"), str("PROMETHEUS_PATH", "/metrics")
	}
	switch lv := strings.ToUpper(str("LOG_LEVEL", "WARN")); lv {
	case "DEBUG", "TRACE":
		s.logLevel = slog.LevelDebug
	case "INFO":
		s.logLevel = slog.LevelInfo
	case "WARN", "WARNING":
		s.logLevel = slog.LevelWarn
	case "ERROR", "FATAL", "PANIC":
		s.logLevel = slog.LevelError
	default:
		errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: debug, info, warn or error", lv))
	}
	switch f := strings.ToLower(str("LOG_FORMAT", "text")); f {
	case "text":
	case "json":
		s.logJSON = true
	default:
		errs = append(errs, fmt.Errorf("LOG_FORMAT=%q: text or json", f))
	}
	o := &s.options
	o.Shadow = boolean("SHADOW_MODE", false)
	o.Headers = boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false)
	o.LimitHeader = str("LIMIT_LIMIT_HEADER", "RateLimit-Limit")
	o.RemainingHeader = str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining")
	o.ResetHeader = str("LIMIT_RESET_HEADER", "RateLimit-Reset")
	if v := getenv("NEAR_LIMIT_RATIO"); v != "" {
		r, err := strconv.ParseFloat(v, 32)
		if err != nil || r < 0 || r > 1 {
			errs = append(errs, fmt.Errorf("NEAR_LIMIT_RATIO=%q: a number from 0 to 1", v))
		}
		o.NearLimitRatio = r
	}
	if !boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", true) {
		s.warnings = append(s.warnings, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: floodgate-rls never charges a refused hit, so it is always true in effect")
	}

	// What would decide otherwise, and is not implemented: refuse.
	refuse := func(name, why string) {
		errs = append(errs, fmt.Errorf("%s=%s: %s", name, getenv(name), why))
	}
	if boolean("QUOTA_MODE", false) {
		refuse("QUOTA_MODE", "quota mode is not implemented by floodgate-rls")
	}
	if boolean("RESPONSE_DYNAMIC_METADATA", false) {
		refuse("RESPONSE_DYNAMIC_METADATA", "dynamic metadata in responses is not implemented by floodgate-rls")
	}
	if boolean("MERGE_DOMAIN_CONFIG", false) {
		refuse("MERGE_DOMAIN_CONFIG", "a domain must be in one file with floodgate-rls")
	}
	if t := str("CONFIG_TYPE", "FILE"); !strings.EqualFold(t, "FILE") {
		refuse("CONFIG_TYPE", "floodgate-rls reads its configuration from files only")
	}
	if t := str("BACKEND_TYPE", "redis"); !strings.EqualFold(t, "redis") {
		refuse("BACKEND_TYPE", "floodgate-rls keeps its limits in process, or on Redis")
	}
	if boolean("REDIS_PERSECOND", false) {
		refuse("REDIS_PERSECOND", "one Redis holds every rule with floodgate-rls")
	}
	if getenv("GRPC_UDS") != "" {
		refuse("GRPC_UDS", "floodgate-rls serves gRPC on TCP only")
	}
	if boolean("GRPC_SERVER_USE_TLS", false) {
		refuse("GRPC_SERVER_USE_TLS", "floodgate-rls serves gRPC without TLS; put it behind a proxy that ends TLS")
	}
	if url := getenv("REDIS_URL"); url != "" {
		s.redis = readRedis(getenv, url, &errs, boolean, duration)
	}
	ignored := []string{"USE_STATSD", "USE_DOG_STATSD", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS",
		"TRACING_ENABLED", "LOCAL_CACHE_SIZE_IN_BYTES", "EXPIRATION_JITTER_MAX_SECONDS", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
		"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL",
		"REDIS_STARTUP_MAX_ELAPSED_TIME", "PROMETHEUS_MAPPER_YAML"}
	if s.redis == nil {
		ignored = append(ignored, "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_AUTH", "REDIS_TLS", "REDIS_POOL_SIZE", "REDIS_TIMEOUT", "CACHE_KEY_PREFIX",
			"FLOODGATE_LEASE_MAX", "FLOODGATE_FAILURE_MODE", "FLOODGATE_REDIS_TIMEOUT")
	}

	// What has no meaning here: warn, and go on.
	for _, name := range ignored {
		if getenv(name) != "" {
			why := "has no meaning for floodgate-rls, and is ignored"
			switch {
			case strings.Contains(name, "STATSD") || name == "EXTRA_TAGS" || name == "STATS_FLUSH_INTERVAL" || name == "DISABLE_STATS" || name == "PROMETHEUS_MAPPER_YAML":
				why = "floodgate-rls sends no statsd; its figures are on /metrics, named as envoyproxy/ratelimit's Prometheus mapping names them"
			case name == "LOCAL_CACHE_SIZE_IN_BYTES":
				why = "floodgate-rls keeps no cache of keys over their limit: it needs none"
			case name == "EXPIRATION_JITTER_MAX_SECONDS":
				why = "floodgate-rls's keys expire when they hold nothing"
			case s.redis == nil && (strings.HasPrefix(name, "REDIS_") || strings.HasPrefix(name, "FLOODGATE_") || name == "CACHE_KEY_PREFIX"):
				why = "the limits are in process (no REDIS_URL), so this Redis setting is ignored"
			case strings.HasPrefix(name, "REDIS_"):
				why = "floodgate-rls's Redis client (go-redis) pipelines and pools on its own, and the FailureMode answers while Redis is away"
			}
			s.warnings = append(s.warnings, name+" "+why)
		}
	}
	return s, errors.Join(errs...)
}

// readRedis reads the Redis backend's settings: envoyproxy/ratelimit's,
// and floodgate's own (FLOODGATE_LEASE_MAX, FLOODGATE_FAILURE_MODE,
// FLOODGATE_REDIS_TIMEOUT).
func readRedis(getenv func(string) string, url string, errs *[]error, boolean func(string, bool) bool, duration func(string, time.Duration) time.Duration) *redisSettings {
	fail := func(format string, args ...any) { *errs = append(*errs, fmt.Errorf(format, args...)) }
	r := &redisSettings{network: "unix"}
	switch t := strings.ToUpper(getenv("REDIS_TYPE")); t {
	case "", "SINGLE":
	case "CLUSTER":
		r.cluster = true
	default:
		fail("REDIS_TYPE=%q: SINGLE or CLUSTER (floodgate-rls has no Sentinel client)", t)
	}
	switch st := strings.ToLower(getenv("REDIS_SOCKET_TYPE")); st {
	case "", "unix":
	case "tcp":
		r.network = "tcp"
	default:
		fail("REDIS_SOCKET_TYPE=%q: unix or tcp", st)
	}
	if r.cluster && r.network != "tcp" {
		fail("REDIS_TYPE=CLUSTER needs REDIS_SOCKET_TYPE=tcp")
	}
	for _, a := range strings.Split(url, ",") {
		if a = strings.TrimSpace(a); a != "" {
			r.addrs = append(r.addrs, a)
		}
	}
	if len(r.addrs) > 1 && !r.cluster {
		fail("REDIS_URL=%q: several addresses need REDIS_TYPE=CLUSTER", url)
	}
	if auth := getenv("REDIS_AUTH"); auth != "" {
		if u, p, ok := strings.Cut(auth, ":"); ok {
			r.user, r.password = u, p
		} else {
			r.password = auth
		}
	}
	if boolean("REDIS_TLS", false) {
		r.tls = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)}
		if ca := getenv("REDIS_TLS_CACERT"); ca != "" {
			pem, err := os.ReadFile(ca)
			pool := x509.NewCertPool()
			if err != nil || !pool.AppendCertsFromPEM(pem) {
				fail("REDIS_TLS_CACERT=%q: no certificate read (%v)", ca, err)
			}
			r.tls.RootCAs = pool
		}
		if cert, key := getenv("REDIS_TLS_CLIENT_CERT"), getenv("REDIS_TLS_CLIENT_KEY"); cert != "" || key != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				fail("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY: %v", err)
			}
			r.tls.Certificates = []tls.Certificate{pair}
		}
	}
	if v := getenv("REDIS_POOL_SIZE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fail("REDIS_POOL_SIZE=%q: a whole number of 1 or more", v)
		}
		r.poolSize = n
	}
	r.dial = duration("REDIS_TIMEOUT", 10*time.Second)
	r.store.Timeout = duration("FLOODGATE_REDIS_TIMEOUT", 0)
	r.store.Prefix = "floodgate-rls"
	if p := getenv("CACHE_KEY_PREFIX"); p != "" {
		r.store.Prefix = strings.TrimRight(p, ":_")
	}
	switch m := strings.ToLower(getenv("FLOODGATE_FAILURE_MODE")); m {
	case "", "open":
		r.store.FailureMode = redislimit.FailOpen
	case "closed":
		r.store.FailureMode = redislimit.FailClosed
	case "local":
		r.store.FailureMode = redislimit.FailLocal
	default:
		fail("FLOODGATE_FAILURE_MODE=%q: open, closed or local", m)
	}
	if v := getenv("FLOODGATE_LEASE_MAX"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			fail("FLOODGATE_LEASE_MAX=%q: a whole number, 0 for a round trip per request", v)
		}
		r.store.Lease.Max = n
	}
	r.store.HashTag = rls.HashTag
	return r
}

// client makes the Redis client.
func (r *redisSettings) client() redis.UniversalClient {
	if r.cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.addrs, Username: r.user, Password: r.password,
			TLSConfig: r.tls, PoolSize: r.poolSize, DialTimeout: r.dial, ContextTimeoutEnabled: true})
	}
	return redis.NewClient(&redis.Options{Network: r.network, Addr: r.addrs[0], Username: r.user, Password: r.password,
		TLSConfig: r.tls, PoolSize: r.poolSize, DialTimeout: r.dial, ContextTimeoutEnabled: true})
}

func (s *settings) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: s.logLevel}
	if s.logJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
