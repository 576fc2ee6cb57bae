package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/floodgate-go/floodgate/memcachelimit"
)

// memcacheSettings are the memcached backend's (BACKEND_TYPE=memcache):
// where memcached is, as envoyproxy/ratelimit reads it, and the
// memcachelimit.Config of the Store kept on it.
type memcacheSettings struct {
	hosts      []string      // MEMCACHE_HOST_PORT; or
	srv        string        // MEMCACHE_SRV, _service._proto.name
	srvRefresh time.Duration // MEMCACHE_SRV_REFRESH: 0, never
	maxIdle    int           // MEMCACHE_MAX_IDLE_CONNS
	tls        *tls.Config   // MEMCACHE_TLS: nil, plain TCP
	store      memcachelimit.Config
}

// defaultMemcacheTimeout is FLOODGATE_MEMCACHE_TIMEOUT when unset: the
// time a decision waits for memcached, as FLOODGATE_REDIS_TIMEOUT's for
// Redis.
const defaultMemcacheTimeout = 100 * time.Millisecond

// defaultMemcacheMaxIdle is envoyproxy/ratelimit's MEMCACHE_MAX_IDLE_CONNS
// when unset: idle connections kept per memcached server.
const defaultMemcacheMaxIdle = 2

// srvName is envoyproxy/ratelimit's form of MEMCACHE_SRV:
// _service._proto.name.
var srvName = regexp.MustCompile(`^_(.+?)\._(.+?)\.(.+)$`)

// readMemcache reads the memcached backend's settings:
// envoyproxy/ratelimit's MEMCACHE_*, CACHE_KEY_PREFIX, and floodgate's
// own (FLOODGATE_FAILURE_MODE, FLOODGATE_MEMCACHE_TIMEOUT;
// FLOODGATE_LEASE_MAX, which memcached has no lease mode for, is
// refused).
func readMemcache(getenv func(string) string, errs *[]error, warn func(string), boolean func(string, bool) bool, duration func(string, time.Duration) time.Duration) *memcacheSettings {
	fail := func(format string, args ...any) { *errs = append(*errs, fmt.Errorf(format, args...)) }
	m := &memcacheSettings{srv: strings.TrimSpace(getenv("MEMCACHE_SRV")), maxIdle: defaultMemcacheMaxIdle}
	hostPort := getenv("MEMCACHE_HOST_PORT")
	for _, a := range strings.Split(hostPort, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil {
			fail("MEMCACHE_HOST_PORT=%q: %q is not host:port", hostPort, a)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			fail("MEMCACHE_HOST_PORT=%q: %q has no port from 1 to 65535", hostPort, a)
		}
		m.hosts = append(m.hosts, a)
	}
	switch {
	case m.srv != "" && len(m.hosts) > 0:
		fail("MEMCACHE_HOST_PORT and MEMCACHE_SRV are both set: BACKEND_TYPE=memcache takes one of them")
	case m.srv == "" && len(m.hosts) == 0:
		fail("BACKEND_TYPE=memcache needs MEMCACHE_HOST_PORT (host:port,...) or MEMCACHE_SRV (_service._proto.name)")
	case m.srv != "" && !srvName.MatchString(m.srv):
		fail("MEMCACHE_SRV=%q: not an SRV name (_service._proto.name)", m.srv)
	}
	m.srvRefresh = duration("MEMCACHE_SRV_REFRESH", 0)
	if m.srv == "" && getenv("MEMCACHE_SRV_REFRESH") != "" {
		warn("MEMCACHE_SRV_REFRESH refreshes MEMCACHE_SRV's servers, and MEMCACHE_SRV is not set: it is ignored")
	}
	if v := getenv("MEMCACHE_MAX_IDLE_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fail("MEMCACHE_MAX_IDLE_CONNS=%q: a whole number of 1 or more", v)
		}
		m.maxIdle = n
	}
	if boolean("MEMCACHE_TLS", false) {
		m.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		if ca := getenv("MEMCACHE_TLS_CACERT"); ca != "" {
			pool, err := caPool(ca)
			if err != nil {
				fail("MEMCACHE_TLS_CACERT=%q: %v", ca, err)
			}
			m.tls.RootCAs = pool
		}
		if boolean("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
			// As envoyproxy/ratelimit: the name is not checked, the
			// chain still is, to MEMCACHE_TLS_CACERT or the system's.
			m.tls.InsecureSkipVerify = true
			m.tls.VerifyConnection = verifyChain(m.tls.RootCAs)
		}
		if cert, key := getenv("MEMCACHE_TLS_CLIENT_CERT"), getenv("MEMCACHE_TLS_CLIENT_KEY"); cert != "" || key != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				fail("MEMCACHE_TLS_CLIENT_CERT and MEMCACHE_TLS_CLIENT_KEY: %v", err)
			}
			m.tls.Certificates = []tls.Certificate{pair}
		}
	}
	m.store.Timeout = duration("FLOODGATE_MEMCACHE_TIMEOUT", defaultMemcacheTimeout)
	if m.store.Timeout == 0 {
		fail("FLOODGATE_MEMCACHE_TIMEOUT=0: a decision must wait for memcached some time (%v when unset)", defaultMemcacheTimeout)
	}
	// As on Redis, and with the separator memcachelimit's keys need.
	m.store.Prefix = "floodgate-rls:"
	if p := getenv("CACHE_KEY_PREFIX"); p != "" {
		m.store.Prefix = strings.TrimRight(p, ":_") + ":"
		if len(m.store.Prefix) > 128 || strings.IndexFunc(m.store.Prefix, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			fail("CACHE_KEY_PREFIX=%q: on memcached, at most 127 bytes, and no space or control byte (memcached's keys hold none)", p)
		}
	}
	switch failureMode(getenv, fail) {
	case "open":
		m.store.FailureMode = memcachelimit.FailOpen
	case "closed":
		m.store.FailureMode = memcachelimit.FailClosed
	case "local":
		m.store.FailureMode = memcachelimit.FailLocal
	default:
		m.store.FailureMode = memcachelimit.FailError
	}
	if v := getenv("FLOODGATE_LEASE_MAX"); v != "" && v != "0" {
		fail("FLOODGATE_LEASE_MAX=%s: memcached has no lease mode (BACKEND_TYPE=memcache makes a round trip per request); unset it, or set it to 0", v)
	}
	return m
}

// verifyChain checks a server's certificate chain to roots (nil: the
// system's), whatever name the certificate holds.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("memcached presented no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}

// failureMode reads FLOODGATE_FAILURE_MODE, for either backend: error
// (the default), open, closed or local, in lower case.
func failureMode(getenv func(string) string, fail func(string, ...any)) string {
	switch m := strings.ToLower(getenv("FLOODGATE_FAILURE_MODE")); m {
	case "", "error":
		// As envoyproxy/ratelimit: the call fails, and Envoy's
		// failure_mode_deny decides.
		return "error"
	case "open", "closed", "local":
		return m
	default:
		fail("FLOODGATE_FAILURE_MODE=%q: error, open, closed or local", m)
		return "error"
	}
}

// memcacheResolver is the resolver of MEMCACHE_SRV: the system's, or a
// test's on loopback.
var memcacheResolver = net.DefaultResolver

// lookupServers resolves MEMCACHE_SRV into memcached's host:port list,
// sorted, as envoyproxy/ratelimit sorts it: the client picks a key's
// server by its place in the list, so every replica must list them
// alike.
func lookupServers(ctx context.Context, srv string) ([]string, error) {
	m := srvName.FindStringSubmatch(srv)
	if m == nil {
		return nil, fmt.Errorf("MEMCACHE_SRV=%q: not an SRV name (_service._proto.name)", srv)
	}
	_, recs, err := memcacheResolver.LookupSRV(ctx, m[1], m[2], m[3])
	if err != nil {
		return nil, fmt.Errorf("MEMCACHE_SRV=%q: %w", srv, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("MEMCACHE_SRV=%q: no servers", srv)
	}
	servers := make([]string, len(recs))
	for i, r := range recs {
		servers[i] = net.JoinHostPort(strings.TrimSuffix(r.Target, "."), strconv.Itoa(int(r.Port)))
	}
	slices.Sort(servers)
	return servers, nil
}

// client makes the memcached client on the servers the settings name.
// With MEMCACHE_SRV, the servers are resolved now (an error if they are
// not) and, with MEMCACHE_SRV_REFRESH, again on that period, until the
// returned stop is called; a refresh that fails, or finds no server,
// keeps the list before it, with a warning.
func (m *memcacheSettings) client(log *slog.Logger) (*memcache.Client, func(), error) {
	sl := &serverList{}
	servers := m.hosts
	if m.srv != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		servers, err = lookupServers(ctx, m.srv)
		cancel()
		if err != nil {
			return nil, nil, err
		}
	}
	if err := sl.set(servers); err != nil {
		return nil, nil, fmt.Errorf("memcached's servers %q: %w", servers, err)
	}
	c := memcache.NewFromSelector(&sl.list)
	c.MaxIdleConns = m.maxIdle
	// Each read and write within a decision's Timeout, as
	// memcachelimit.Config.Timeout asks.
	c.Timeout = m.store.Timeout
	if m.tls != nil {
		c.DialContext = sl.dialTLS(m.tls)
	}
	stop := func() {}
	if m.srv != "" && m.srvRefresh > 0 {
		stop = refreshServers(sl, m.srv, servers, m.srvRefresh, log)
	}
	return c, stop, nil
}

// serverList is the client's memcache.ServerList, and the name each of
// its addresses was resolved from, for TLS to verify.
type serverList struct {
	list  memcache.ServerList
	names atomic.Pointer[map[string]string] // address (ip:port) → host
}

// set resolves servers, each host:port, to one address each (as
// memcache.ServerList would: the first, IPv4 first), and makes them
// the list, in the same order.
func (sl *serverList) set(servers []string) error {
	addrs := make([]string, len(servers))
	names := make(map[string]string, len(servers))
	for i, s := range servers {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			return err
		}
		host, _, _ := net.SplitHostPort(s)
		addrs[i], names[a.String()] = a.String(), host
	}
	if err := sl.list.SetServers(addrs...); err != nil {
		return err
	}
	sl.names.Store(&names)
	return nil
}

// dialTLS is the client's dialer over TLS with cfg, which verifies each
// server's certificate by the name in MEMCACHE_HOST_PORT or the SRV
// answer that it was resolved from (the client dials the address
// alone).
func (sl *serverList) dialTLS(cfg *tls.Config) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c := cfg
		if host, ok := (*sl.names.Load())[address]; ok && cfg.ServerName == "" {
			c = cfg.Clone()
			c.ServerName = host
		}
		d := &tls.Dialer{Config: c}
		return d.DialContext(ctx, network, address)
	}
}

// refreshServers resolves srv every period and sets sl to what it
// finds, until the returned function is called; that returns once the
// refresh has stopped.
func refreshServers(sl *serverList, srv string, last []string, period time.Duration, log *slog.Logger) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
			servers, err := lookupServers(lctx, srv)
			lcancel()
			if err == nil && !slices.Equal(servers, last) {
				if err = sl.set(servers); err == nil {
					log.Info("memcached's servers changed", "srv", srv, "servers", servers)
					last = servers
				}
			}
			if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
				log.Warn("refreshing memcached's servers: the list before stays", "srv", srv, "servers", last, "err", err)
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// start makes the client and the Store on memcached, and returns them
// with what closes them (the Store, then the SRV
// refresh, then the client's idle connections), for run to call after
// the Server's Close. memcached not answering yet is a warning: until
// it does, FLOODGATE_FAILURE_MODE answers.
func (m *memcacheSettings) start(log *slog.Logger) (*memcachelimit.Store, func(), error) {
	c, stopRefresh, err := m.client(log)
	if err != nil {
		return nil, nil, err
	}
	store, err := memcachelimit.NewStore(c, m.store)
	if err != nil {
		stopRefresh()
		c.Close()
		return nil, nil, err
	}
	if err := c.Ping(); err != nil {
		log.Warn("memcached does not answer yet: until it does, the failure mode answers", "memcached", m.where(), "err", err)
	}
	log.Info("limits on memcached", "memcached", m.where(), "srv_refresh", m.srvRefresh, "max_idle_conns", m.maxIdle, "tls", m.tls != nil)
	return store, func() {
		if err := store.Close(); err != nil {
			log.Error("closing the memcached store", "err", err)
		}
		stopRefresh()
		c.Close()
	}, nil
}

// where names the servers for the log: MEMCACHE_SRV, or
// MEMCACHE_HOST_PORT's list.
func (m *memcacheSettings) where() string {
	if m.srv != "" {
		return m.srv
	}
	return strings.Join(m.hosts, ",")
}
