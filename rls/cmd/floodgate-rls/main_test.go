package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/redislimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// lockedBuffer is the log, written by the server and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// writeConfig writes a file whole into dir's config directory, as a
// deployment does: to a temporary name, renamed in.
func writeConfig(t *testing.T, root, name, data string) {
	t.Helper()
	tmp := filepath.Join(root, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(root, "current", "config", name)); err != nil {
		t.Fatal(err)
	}
}

// start runs the server with env (and loopback ports chosen by the
// system) until the test ends.
func start(t *testing.T, env map[string]string) (addrs, *lockedBuffer) {
	t.Helper()
	a, logs, stop := serve(t, env)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("run after cancel: %v", err)
		}
	})
	return a, logs
}

// serve runs the server with env (and loopback ports chosen by the
// system), and returns what stops it: it ends run's context and returns
// what run returned. The test's end stops it, if the test did not.
func serve(t *testing.T, env map[string]string) (addrs, *lockedBuffer, func() error) {
	t.Helper()
	base := map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "LOG_LEVEL": "info"}
	for k, v := range env {
		base[k] = v
	}
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return base[k] }, logs, func(a addrs) { got <- a }) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	select {
	case a := <-got:
		return a, logs, stop
	case err := <-done:
		done <- err // for stop, in the cleanup
		t.Fatalf("run: %v\n%s", err, logs)
		return addrs{}, nil, nil
	}
}

// manualTicks makes the watcher of every run the test starts tick only
// when the test sends on ticks; stopped is closed once run stops them.
// Call it before starting run.
func manualTicks(t *testing.T) (ticks chan time.Time, stopped chan struct{}) {
	ticks, stopped = make(chan time.Time), make(chan struct{})
	testTicks = func() (<-chan time.Time, func()) { return ticks, sync.OnceFunc(func() { close(stopped) }) }
	t.Cleanup(func() { testTicks = nil })
	return ticks, stopped
}

func runtimeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "current", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		writeConfig(t, root, name, data)
	}
	return root
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServe: the binary's endpoints, as envoyproxy/ratelimit's: gRPC
// ShouldRateLimit and health, /healthcheck, /json, /metrics; a config
// changed on disk is served without a restart, keeping each key's
// count; a config that fails keeps the one before and is counted.
func TestServe(t *testing.T) {
	root := runtimeDir(t, map[string]string{"api.yaml": "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 3}\n"})
	a, logs := start(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "USE_STATSD": "true"})
	if !strings.Contains(logs.String(), "USE_STATSD") {
		t.Fatalf("no word of USE_STATSD at start:\n%s", logs)
	}
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	passed := 0 // a year's window: no boundary falls in the test but once in a year's worth of runs
	calls := 0
	call := func() *pb.RateLimitResponse {
		t.Helper()
		calls++
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "api",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == pb.RateLimitResponse_OK {
			passed++
		}
		return resp
	}
	for i, want := range []uint32{2, 1} {
		if r := call(); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != want {
			t.Fatalf("call %d: %v", i, r)
		}
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health: %v %v", h, err)
	}
	if code, body := get(t, "http://"+a.http+"/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck: %d %q", code, body)
	}
	resp, err := http.Post("http://"+a.http+"/json", "application/json",
		strings.NewReader(`{"domain": "api", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/json: %d", resp.StatusCode)
	}
	if r := call(); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the fourth hit of 3: %v", r)
	}

	// A reload that raises the limit to 5 keeps what the key had left,
	// nothing (floodgate's SetRule: a key never holds more after a change
	// than before it), until its window ends.
	writeConfig(t, root, "api.yaml", "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 5}\n")
	waitFor(t, "the reload", func() bool { return call().Statuses[0].CurrentLimit.RequestsPerUnit == 5 })
	if code, body := get(t, "http://"+a.debug+"/metrics"); code != 200 || !strings.Contains(body, "ratelimit_service_config_load_success 2") {
		t.Fatalf("/metrics after the reload: %d\n%s", code, body)
	}
	for range 3 {
		call()
	}
	if passed != 2 { // and the one through /json: 3
		t.Fatalf("%d passed in all, want 3: the reload gave the key allowance", passed+1)
	}

	// A file that fails keeps the config before it, and is counted.
	writeConfig(t, root, "api.yaml", "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")
	waitFor(t, "the failed load", func() bool {
		_, body := get(t, "http://"+a.debug+"/metrics")
		return strings.Contains(body, "ratelimit_service_config_load_error 1")
	})
	if r := call(); r.Statuses[0].CurrentLimit.RequestsPerUnit != 5 {
		t.Fatalf("after a failed load: %v, want the limit of 5 kept", r)
	}
	_, body := get(t, "http://"+a.debug+"/metrics")
	for _, want := range []string{`ratelimit_service_rate_limit_total_hits{domain="api",key1="k",key2=""}`, `floodgate_keys{limiter="rls",policy="api.k",route="api"} 1`,
		// The gRPC server's, as Envoy Gateway's mapping names them.
		fmt.Sprintf(`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} %d`, calls),
		fmt.Sprintf(`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} %d`, calls),
		`ratelimit_service_total_requests{grpc_method="Check"} 1`} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, `"v"`) {
		t.Fatalf("/metrics names a request's value:\n%s", body)
	}
}

// waitFor polls cond until it holds, for a change the server makes on
// its own clock (the watcher's ticks); it asserts no speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSettings: every setting that does not parse, or that would decide
// otherwise and is not implemented, stops the start with its name.
func TestSettings(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"bad port":           {"PORT": "http"},
		"port too big":       {"GRPC_PORT": "70000"},
		"bad bool":           {"SHADOW_MODE": "maybe"},
		"bad ratio":          {"NEAR_LIMIT_RATIO": "1.5"},
		"bad log level":      {"LOG_LEVEL": "loud"},
		"bad log format":     {"LOG_FORMAT": "xml"},
		"quota mode":         {"QUOTA_MODE": "sometimes"},
		"metadata":           {"RESPONSE_DYNAMIC_METADATA": "yes please"},
		"config bytes":       {"FLOODGATE_CONFIG_MAX_BYTES": "0"},
		"config type":        {"CONFIG_TYPE": "CONSUL"},
		"memcache":           {"BACKEND_TYPE": "memcache"},
		"other backend":      {"BACKEND_TYPE": "dynamodb"},
		"per-second":         {"REDIS_PERSECOND": "true"},
		"bad age":            {"GRPC_MAX_CONNECTION_AGE": "forever"},
		"unix socket":        {"GRPC_UDS": "/tmp/x.sock"},
		"grpc tls, no files": {"GRPC_SERVER_USE_TLS": "true"},
	} {
		_, err := readSettings(func(k string) string { return env[k] })
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		for k := range env {
			if !strings.Contains(err.Error(), k) {
				t.Errorf("%s: %v does not name %s", name, err, k)
			}
		}
	}
	s, err := readSettings(func(k string) string {
		return map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false", "CACHE_KEY_PREFIX": "x", "LOCAL_CACHE_SIZE_IN_BYTES": "1024"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(s.warnings, "\n"); !strings.Contains(w, "CACHE_KEY_PREFIX") || !strings.Contains(w, "LOCAL_CACHE_SIZE_IN_BYTES") {
		t.Fatalf("warnings: %q", s.warnings)
	}
	if s.options.StopIncrementOverLimit {
		t.Error("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false set StopIncrementOverLimit")
	}
	s, err = readSettings(func(k string) string { return map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}[k] })
	if err != nil || !s.options.StopIncrementOverLimit {
		t.Errorf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: StopIncrementOverLimit %v, %v", s.options.StopIncrementOverLimit, err)
	}
	// FLOODGATE_FAILURE_MODE: unset, the call fails as envoyproxy/ratelimit's
	// does, for Envoy's failure_mode_deny to decide.
	for v, want := range map[string]redislimit.FailureMode{"": redislimit.FailError, "error": redislimit.FailError, "open": redislimit.FailOpen,
		"closed": redislimit.FailClosed, "LOCAL": redislimit.FailLocal} {
		s, err := readSettings(func(k string) string {
			return map[string]string{"REDIS_URL": "127.0.0.1:6379", "FLOODGATE_FAILURE_MODE": v}[k]
		})
		if err != nil || s.redis.store.FailureMode != want {
			t.Errorf("FLOODGATE_FAILURE_MODE=%q: %v, %v; want %v", v, s.redis.store.FailureMode, err, want)
		}
	}
	if _, err := readSettings(func(k string) string {
		return map[string]string{"REDIS_URL": "127.0.0.1:6379", "FLOODGATE_FAILURE_MODE": "maybe"}[k]
	}); err == nil || !strings.Contains(err.Error(), "FLOODGATE_FAILURE_MODE") {
		t.Errorf("FLOODGATE_FAILURE_MODE=maybe: %v", err)
	}
	testMemcacheSettings(t)
}

// TestStartWithoutConfig: a runtime directory that does not load stops
// the start, unless FORCE_START_WITHOUT_INITIAL_CONFIG, which serves
// with no domain until a file loads.
func TestStartWithoutConfig(t *testing.T) {
	root := runtimeDir(t, map[string]string{"bad.yaml": "domain: [\n"})
	env := map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}
	err := run(context.Background(), func(k string) string { return env[k] }, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("run with a bad file: %v, want an error naming it", err)
	}
	a, _ := start(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"})
	if code, _ := get(t, "http://"+a.http+"/healthcheck"); code != 500 {
		t.Fatalf("/healthcheck with no config: %d, want 500", code)
	}
	writeConfig(t, root, "bad.yaml", "domain: fixed\n")
	waitFor(t, "health after a config loads", func() bool { code, _ := get(t, "http://"+a.http+"/healthcheck"); return code == 200 })
}

// apiConfig is a configuration of one rule of n a year; each n writes a
// file of its own size, so that the watcher sees it change whatever the
// grain of the file system's clock.
func apiConfig(n int) string {
	return fmt.Sprintf("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: %d}\n", n)
}

// metricLine reports whether the debug port's /metrics holds line whole.
func metricLine(t *testing.T, a addrs, line string) bool {
	t.Helper()
	_, body := get(t, "http://"+a.debug+"/metrics")
	return strings.Contains(body, "\n"+line+"\n")
}

// TestFirstConfigOnce: run loads the first configuration itself, before
// it serves; the watcher's first look, which finds the same files, or
// the same error, applies nothing again (no second load counted or
// logged); a change at a later tick is applied.
func TestFirstConfigOnce(t *testing.T) {
	for _, tc := range []struct {
		name, first string
		env         map[string]string
		wantLog     string // run's word of the first configuration
		wantMetric  string
	}{
		{"loads", apiConfig(3), nil, `msg="configuration loaded"`, "ratelimit_service_config_load_success 1"},
		{"fails", "domain: [\n", map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
			`msg="starting without a configuration"`, "ratelimit_service_config_load_error 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ticks, _ := manualTicks(t)
			root := runtimeDir(t, map[string]string{"api.yaml": tc.first})
			env := map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current")}
			for k, v := range tc.env {
				env[k] = v
			}
			a, logs := start(t, env)
			// The watch looks, then waits for a tick: once it takes one,
			// its first look is over.
			ticks <- time.Time{}
			l := logs.String()
			if n := strings.Count(l, `msg="configuration`) + strings.Count(l, `msg="starting`); n != 1 || !strings.Contains(l, tc.wantLog) {
				t.Fatalf("after the watcher's first look: %d words of a configuration, want run's alone (%s):\n%s", n, tc.wantLog, l)
			}
			if !metricLine(t, a, tc.wantMetric) {
				t.Fatalf("after the watcher's first look: no %s", tc.wantMetric)
			}
			writeConfig(t, root, "api.yaml", apiConfig(40))
			ticks <- time.Time{} // a look that finds the change
			ticks <- time.Time{} // which has ended
			if !strings.Contains(logs.String(), `msg="configuration loaded" domains=1 rules=1`) || strings.Contains(logs.String(), "not loaded") {
				t.Fatalf("a change at a later tick:\n%s", logs)
			}
		})
	}
}

// TestStopWatcherBeforeClose: on the way out, the watcher stops before
// the Server closes. A change written, and a tick sent, once the Server
// is closed find no watcher to take them: one still running would load
// the change and call SetConfig on the closed Server, which fails ("rls:
// SetConfig after Close"), and log that the configuration was not
// loaded.
func TestStopWatcherBeforeClose(t *testing.T) {
	ticks, stopped := manualTicks(t)
	root := runtimeDir(t, map[string]string{"api.yaml": apiConfig(3)})
	var late bool
	var hookErr error
	testClosed = func() {
		tmp := filepath.Join(root, ".tmp-late")
		if hookErr = os.WriteFile(tmp, []byte(apiConfig(500)), 0o644); hookErr == nil {
			hookErr = os.Rename(tmp, filepath.Join(root, "current", "config", "api.yaml"))
		}
		select {
		case ticks <- time.Time{}:
			late = true
		case <-stopped:
		}
	}
	t.Cleanup(func() { testClosed = nil })
	a, logs, stop := serve(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current")})

	// While serving, the ticks sent here are the watcher's: after its
	// first look (over once it takes a tick), a change, and a look that
	// loads it (over once it takes the next).
	ticks <- time.Time{}
	writeConfig(t, root, "api.yaml", apiConfig(40))
	ticks <- time.Time{}
	ticks <- time.Time{}
	if !metricLine(t, a, "ratelimit_service_config_load_success 2") {
		t.Fatalf("a change while serving was not loaded:\n%s", logs)
	}

	if err := stop(); err != nil {
		t.Fatalf("run after cancel: %v\n%s", err, logs)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if late {
		t.Error("the watcher took a tick after the Server closed")
	}
	if l := logs.String(); strings.Contains(l, "not loaded") || strings.Contains(l, "after Close") || strings.Contains(l, "level=ERROR") {
		t.Errorf("an error on the way out:\n%s", l)
	}
}

// TestHostsIPv6: HOST and GRPC_HOST of "::", as Istio's sample sets them:
// the servers listen on every address, IPv6 and IPv4.
func TestHostsIPv6(t *testing.T) {
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		ln.Close()
	}
	root := runtimeDir(t, map[string]string{"api.yaml": "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"})
	a, _ := start(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "HOST": "::", "GRPC_HOST": "::", "DEBUG_HOST": "::"})
	for _, host := range []string{"::1", "127.0.0.1"} {
		_, port, err := net.SplitHostPort(a.grpc)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := xdsCall(t, grpcClient(t, net.JoinHostPort(host, port)), "v"); code != pb.RateLimitResponse_OK {
			t.Fatalf("gRPC on %s: %v", host, code)
		}
		_, hport, _ := net.SplitHostPort(a.http)
		if code, body := get(t, "http://"+net.JoinHostPort(host, hport)+"/healthcheck"); code != 200 || body != "OK" {
			t.Fatalf("/healthcheck on %s: %d %q", host, code, body)
		}
	}
}

// exampleCommand and exampleCurl are the README's first run of
// floodgate-rls, on the example runtime directory.
const (
	exampleCommand = "cd rls && RUNTIME_ROOT=example/runtime go run ./cmd/floodgate-rls"
	exampleBody    = `{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`
	exampleCurl    = "curl -s localhost:8080/json -d '" + exampleBody + "'"
)

// TestExampleRuntime: the README's first run works on a fresh clone: the
// example runtime directory loads, and its curl line is answered, OK
// three times a minute, then 429.
func TestExampleRuntime(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{exampleCommand, exampleCurl} {
		if !strings.Contains(string(readme), line) {
			t.Errorf("the README lacks the line %q", line)
		}
	}
	a, _ := start(t, map[string]string{"RUNTIME_ROOT": filepath.Join("..", "..", "example", "runtime")})
	for i, want := range []int{200, 200, 200, 429} {
		resp, err := http.Post("http://"+a.http+"/json", "application/json", strings.NewReader(exampleBody))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || !strings.Contains(string(body), `"requestsPerUnit":3`) {
			t.Fatalf("call %d: %d %s; want %d", i, resp.StatusCode, body, want)
		}
	}
}
