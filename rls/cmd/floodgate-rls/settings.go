package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/redis/go-redis/v9"
)

// settings are everything floodgate-rls takes from its environment:
// envoyproxy/ratelimit's variables, as this server reads them, and
// floodgate's own. readSettings makes them, and checks every value once,
// at start; nothing else reads the environment. A variable that would
// make envoyproxy/ratelimit decide otherwise, and that this server does
// not implement, is an error; one that has no meaning here is a warning,
// in warnings, for run to log once it has a logger.
type settings struct {
	host, port, grpcHost, grpcPort, debugHost, debugPort string
	maxConnAge, maxConnAgeGrace                          time.Duration
	promAddr, promPath                                   string
	runtimeRoot, runtimeSubdir, runtimeAppDir            string
	ignoreDot, forceStart, healthyWithConfig             bool
	logLevel                                             slog.Level
	logJSON                                              bool
	options                                              rls.Options
	grpcTLS                                              *tlsFiles    // nil: gRPC without TLS
	xds                                                  *xdsSettings // nil: the configuration is read from files
	load                                                 rls.LoadOptions
	warnings                                             []string
	redis                                                *redisSettings    // nil: the limits are in process, or on memcached
	memcache                                             *memcacheSettings // nil: the limits are in process, or on Redis
	tracing                                              *tracingSettings  // nil: TRACING_ENABLED is not true
}

// redisSettings are the Redis backend's: where Redis is and how to
// reach it, and the redislimit.Config of the Store kept on it.
type redisSettings struct {
	cluster  bool
	sentinel bool   // addrs are the Sentinels of master
	master   string // REDIS_TYPE=SENTINEL: the master's name
	addrs    []string
	network  string
	user     string
	password string
	// REDIS_SENTINEL_AUTH: the Sentinels' own
	sentinelUser, sentinelPassword string
	tls                            *tls.Config
	poolSize                       int
	dial                           time.Duration
	store                          redislimit.Config
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
	o.Quota = boolean("QUOTA_MODE", false)
	o.DynamicMetadata = boolean("RESPONSE_DYNAMIC_METADATA", false)
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
	o.StopIncrementOverLimit = boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)

	// What would decide otherwise, and is not implemented: refuse.
	refuse := func(name, why string) {
		errs = append(errs, fmt.Errorf("%s=%s: %s", name, getenv(name), why))
	}
	s.load.MergeDomains = boolean("MERGE_DOMAIN_CONFIG", false)
	// Files and pushes are loaded, and put in force, one at a time, on
	// one pace.
	s.load.Pace = newPacer(loadRun, loadRest, loadYield).pace
	o.Pace = s.load.Pace
	s.tracing = readTracing(getenv, &errs, boolean)
	if v := getenv("FLOODGATE_CONFIG_MAX_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("FLOODGATE_CONFIG_MAX_BYTES=%q: a whole number of bytes, 1 or more", v))
		}
		s.load.MaxBytes = n
	}
	readBounds(getenv, &errs, &s.load)
	switch t := str("CONFIG_TYPE", "FILE"); {
	case strings.EqualFold(t, "FILE"):
	case strings.EqualFold(t, "GRPC_XDS_SOTW"):
		s.xds = readXDS(getenv, &errs, func(w string) { s.warnings = append(s.warnings, w) }, boolean, duration, s.load)
	default:
		refuse("CONFIG_TYPE", "FILE or GRPC_XDS_SOTW")
	}
	switch t := str("BACKEND_TYPE", "redis"); {
	case strings.EqualFold(t, "redis"):
	case strings.EqualFold(t, "memcache"):
		s.memcache = readMemcache(getenv, &errs, func(w string) { s.warnings = append(s.warnings, w) }, boolean, duration)
	default:
		refuse("BACKEND_TYPE", "redis (in process without REDIS_URL) or memcache")
	}
	if boolean("REDIS_PERSECOND", false) {
		refuse("REDIS_PERSECOND", "one Redis holds every rule with floodgate-rls")
	}
	if getenv("GRPC_UDS") != "" {
		refuse("GRPC_UDS", "floodgate-rls serves gRPC on TCP only")
	}
	s.grpcTLS = readGRPCTLS(getenv, boolean("GRPC_SERVER_USE_TLS", false), &errs, func(w string) { s.warnings = append(s.warnings, w) })
	if url := getenv("REDIS_URL"); url != "" && s.memcache == nil {
		s.redis = readRedis(getenv, url, &errs, boolean, duration)
	}
	ignored := []string{"USE_STATSD", "USE_DOG_STATSD", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS",
		"LOCAL_CACHE_SIZE_IN_BYTES", "EXPIRATION_JITTER_MAX_SECONDS", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
		"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL",
		"REDIS_STARTUP_MAX_ELAPSED_TIME", "PROMETHEUS_MAPPER_YAML"}
	switch {
	case s.memcache != nil:
		ignored = append(ignored, "REDIS_URL", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_TLS", "REDIS_POOL_SIZE", "REDIS_TIMEOUT",
			"FLOODGATE_REDIS_TIMEOUT")
	case s.redis == nil:
		ignored = append(ignored, "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_TLS", "REDIS_POOL_SIZE", "REDIS_TIMEOUT", "CACHE_KEY_PREFIX",
			"FLOODGATE_LEASE_MAX", "FLOODGATE_FAILURE_MODE", "FLOODGATE_REDIS_TIMEOUT")
	}
	if s.memcache == nil {
		ignored = append(ignored, "MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_TLS", "FLOODGATE_MEMCACHE_TIMEOUT")
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
			case s.memcache != nil && (strings.HasPrefix(name, "REDIS_") || name == "FLOODGATE_REDIS_TIMEOUT"):
				why = "the limits are on memcached (BACKEND_TYPE=memcache), so this Redis setting is ignored"
			case s.memcache == nil && (strings.HasPrefix(name, "MEMCACHE_") || name == "FLOODGATE_MEMCACHE_TIMEOUT"):
				why = "BACKEND_TYPE is not memcache, so this memcached setting is ignored"
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
	case "SENTINEL":
		r.sentinel = true
	default:
		fail("REDIS_TYPE=%q: SINGLE, CLUSTER or SENTINEL", t)
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
	switch {
	case r.sentinel:
		// As envoyproxy/ratelimit writes it: the master's name, then the
		// Sentinels, reached over TCP whatever REDIS_SOCKET_TYPE says.
		if len(r.addrs) < 2 {
			fail("REDIS_URL=%q: REDIS_TYPE=SENTINEL needs the master's name, then a Sentinel's host:port at least (mymaster,host:26379,...)", url)
		} else {
			r.master, r.addrs = r.addrs[0], r.addrs[1:]
		}
		r.sentinelUser, r.sentinelPassword = splitAuth(getenv("REDIS_SENTINEL_AUTH"))
	case len(r.addrs) > 1 && !r.cluster:
		fail("REDIS_URL=%q: several addresses need REDIS_TYPE=CLUSTER (or SENTINEL)", url)
	}
	r.user, r.password = splitAuth(getenv("REDIS_AUTH"))
	if boolean("REDIS_TLS", false) {
		r.tls = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)}
		if ca := getenv("REDIS_TLS_CACERT"); ca != "" {
			pool, err := caPool(ca)
			if err != nil {
				fail("REDIS_TLS_CACERT=%q: %v", ca, err)
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
	switch failureMode(getenv, fail) {
	case "open":
		r.store.FailureMode = redislimit.FailOpen
	case "closed":
		r.store.FailureMode = redislimit.FailClosed
	case "local":
		r.store.FailureMode = redislimit.FailLocal
	default: // error, as envoyproxy/ratelimit
		r.store.FailureMode = redislimit.FailError
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

// splitAuth reads REDIS_AUTH or REDIS_SENTINEL_AUTH: user:password, or
// a password alone.
func splitAuth(auth string) (user, password string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// client makes the Redis client. It dials once per connection
// (DialerRetries 1): go-redis would dial a Redis that refuses its
// connections again until the decision's Timeout ran out, and the
// failure would read as a stall; it fails at once instead, with the
// dial's error, which FLOODGATE_FAILURE_MODE answers (the breaker, not
// the dialer, spaces the tries).
func (r *redisSettings) client() redis.UniversalClient {
	if r.sentinel {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: r.master, SentinelAddrs: r.addrs,
			SentinelUsername: r.sentinelUser, SentinelPassword: r.sentinelPassword, Username: r.user, Password: r.password,
			TLSConfig: r.tls, PoolSize: r.poolSize, DialTimeout: r.dial, DialerRetries: 1, ContextTimeoutEnabled: true})
	}
	if r.cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.addrs, Username: r.user, Password: r.password,
			TLSConfig: r.tls, PoolSize: r.poolSize, DialTimeout: r.dial, DialerRetries: 1, ContextTimeoutEnabled: true})
	}
	return redis.NewClient(&redis.Options{Network: r.network, Addr: r.addrs[0], Username: r.user, Password: r.password,
		TLSConfig: r.tls, PoolSize: r.poolSize, DialTimeout: r.dial, DialerRetries: 1, ContextTimeoutEnabled: true})
}

// configDir returns the runtime directory whose files are the
// configuration: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
func (s *settings) configDir() string {
	return filepath.Join(s.runtimeRoot, s.runtimeSubdir, s.runtimeAppDir)
}

// logger returns the log, written to w at LOG_LEVEL in LOG_FORMAT.
func (s *settings) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: s.logLevel}
	if s.logJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
