package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/memcachelimit"
)

// testMemcacheSettings is TestSettings's part for BACKEND_TYPE=memcache:
// envoyproxy/ratelimit's MEMCACHE_* settings, each bad one a start error
// that names it; the defaults; FLOODGATE_FAILURE_MODE as on Redis; and
// FLOODGATE_LEASE_MAX refused, as memcached has no lease mode.
func testMemcacheSettings(t *testing.T) {
	t.Helper()
	mc := func(env map[string]string) (*settings, error) {
		return readSettings(func(k string) string {
			if k == "BACKEND_TYPE" {
				return "memcache"
			}
			return env[k]
		})
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		want string // what the error names
	}{
		"neither":           {nil, "MEMCACHE_HOST_PORT (host:port,...) or MEMCACHE_SRV"},
		"both":              {map[string]string{"MEMCACHE_HOST_PORT": "127.0.0.1:11211", "MEMCACHE_SRV": "_memcache._tcp.example.com"}, "both set"},
		"no port":           {map[string]string{"MEMCACHE_HOST_PORT": "127.0.0.1"}, "MEMCACHE_HOST_PORT"},
		"bad port":          {map[string]string{"MEMCACHE_HOST_PORT": "127.0.0.1:11211,cache:http"}, `"cache:http"`},
		"port 0":            {map[string]string{"MEMCACHE_HOST_PORT": "cache:0"}, "MEMCACHE_HOST_PORT"},
		"not an SRV name":   {map[string]string{"MEMCACHE_SRV": "memcache.example.com"}, "MEMCACHE_SRV"},
		"bad refresh":       {map[string]string{"MEMCACHE_SRV": "_memcache._tcp.example.com", "MEMCACHE_SRV_REFRESH": "often"}, "MEMCACHE_SRV_REFRESH"},
		"negative refresh":  {map[string]string{"MEMCACHE_SRV": "_memcache._tcp.example.com", "MEMCACHE_SRV_REFRESH": "-1s"}, "MEMCACHE_SRV_REFRESH"},
		"idle conns":        {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "MEMCACHE_MAX_IDLE_CONNS": "0"}, "MEMCACHE_MAX_IDLE_CONNS"},
		"idle conns, words": {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "MEMCACHE_MAX_IDLE_CONNS": "two"}, "MEMCACHE_MAX_IDLE_CONNS"},
		"lease":             {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "FLOODGATE_LEASE_MAX": "32"}, "FLOODGATE_LEASE_MAX=32: memcached has no lease mode"},
		"failure mode":      {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "FLOODGATE_FAILURE_MODE": "maybe"}, "FLOODGATE_FAILURE_MODE"},
		"timeout":           {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "FLOODGATE_MEMCACHE_TIMEOUT": "soon"}, "FLOODGATE_MEMCACHE_TIMEOUT"},
		"timeout 0":         {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "FLOODGATE_MEMCACHE_TIMEOUT": "0s"}, "FLOODGATE_MEMCACHE_TIMEOUT"},
		"prefix, space":     {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "CACHE_KEY_PREFIX": "rate limit"}, "CACHE_KEY_PREFIX"},
		"prefix, long":      {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "CACHE_KEY_PREFIX": strings.Repeat("p", 128)}, "CACHE_KEY_PREFIX"},
		"tls, bad ca":       {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "MEMCACHE_TLS": "true", "MEMCACHE_TLS_CACERT": "/nonexistent/ca.crt"}, "MEMCACHE_TLS_CACERT"},
		"tls, half a pair":  {map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "MEMCACHE_TLS": "true", "MEMCACHE_TLS_CLIENT_CERT": "/nonexistent/tls.crt"}, "MEMCACHE_TLS_CLIENT_KEY"},
	} {
		if _, err := mc(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("memcache, %s: %v; want an error naming %s", name, err, tc.want)
		}
	}

	// The defaults: envoyproxy/ratelimit's two idle connections a
	// server, no refresh, the call failing while memcached cannot
	// answer, floodgate-rls's prefix.
	s, err := mc(map[string]string{"MEMCACHE_HOST_PORT": " cache-a:11211, cache-b:11211 ,", "FLOODGATE_LEASE_MAX": "0"})
	if err != nil {
		t.Fatal(err)
	}
	m := s.memcache
	if m == nil || s.redis != nil || !slices.Equal(m.hosts, []string{"cache-a:11211", "cache-b:11211"}) || m.srv != "" || m.maxIdle != 2 ||
		m.srvRefresh != 0 || m.tls != nil || m.store.FailureMode != memcachelimit.FailError || m.store.Prefix != "floodgate-rls:" || m.store.Timeout != 100*time.Millisecond {
		t.Fatalf("memcache's defaults: %+v", m)
	}
	s, err = mc(map[string]string{"MEMCACHE_SRV": "_memcache._tcp.cache.svc", "MEMCACHE_SRV_REFRESH": "30s", "MEMCACHE_MAX_IDLE_CONNS": "64",
		"CACHE_KEY_PREFIX": "rl_", "FLOODGATE_MEMCACHE_TIMEOUT": "250ms", "REDIS_URL": "127.0.0.1:6379", "FLOODGATE_REDIS_TIMEOUT": "1s"})
	if err != nil {
		t.Fatal(err)
	}
	m = s.memcache
	if s.redis != nil || m.srv != "_memcache._tcp.cache.svc" || m.srvRefresh != 30*time.Second || m.maxIdle != 64 || m.store.Prefix != "rl:" ||
		m.store.Timeout != 250*time.Millisecond {
		t.Fatalf("memcache's settings: %+v", m)
	}
	// REDIS_URL and the Redis settings have no meaning on memcached.
	if w := strings.Join(s.warnings, "\n"); !strings.Contains(w, "REDIS_URL the limits are on memcached") || !strings.Contains(w, "FLOODGATE_REDIS_TIMEOUT") {
		t.Errorf("memcache with REDIS_URL: warnings %q", s.warnings)
	}
	for v, want := range map[string]memcachelimit.FailureMode{"": memcachelimit.FailError, "error": memcachelimit.FailError, "open": memcachelimit.FailOpen,
		"closed": memcachelimit.FailClosed, "LOCAL": memcachelimit.FailLocal} {
		s, err := mc(map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "FLOODGATE_FAILURE_MODE": v})
		if err != nil || s.memcache.store.FailureMode != want {
			t.Errorf("memcache, FLOODGATE_FAILURE_MODE=%q: %v; want %v", v, err, want)
		}
	}
	// memcached's settings without BACKEND_TYPE=memcache: named, and
	// ignored.
	s, err = readSettings(func(k string) string { return map[string]string{"MEMCACHE_HOST_PORT": "cache:11211"}[k] })
	if err != nil || s.memcache != nil || !strings.Contains(strings.Join(s.warnings, "\n"), "MEMCACHE_HOST_PORT BACKEND_TYPE is not memcache") {
		t.Errorf("MEMCACHE_HOST_PORT without BACKEND_TYPE=memcache: %v, warnings %q", err, s.warnings)
	}
	s, err = mc(map[string]string{"MEMCACHE_HOST_PORT": "cache:11211", "MEMCACHE_SRV_REFRESH": "1m"})
	if err != nil || !strings.Contains(strings.Join(s.warnings, "\n"), "MEMCACHE_SRV_REFRESH") {
		t.Errorf("MEMCACHE_SRV_REFRESH without MEMCACHE_SRV: %v, warnings %q", err, s.warnings)
	}
}
