package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/testcerts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// egXDS is an Envoy Gateway deployment's xDS, as its controller serves
// it: the envoy-rate-limit secret's files (tls.crt, tls.key, ca.crt) in
// dir, the service's environment for them, and the ADS server's
// credentials (TLS 1.3, a client certificate of the CA required).
type egXDS struct {
	dir   string
	env   map[string]string
	creds grpc.ServerOption
}

func newEGXDS(t *testing.T) *egXDS {
	t.Helper()
	e := &egXDS{dir: t.TempDir()}
	ca := testcerts.NewCA(t, "envoy-gateway")
	cert, key, _ := ca.Issue(t, "envoy-ratelimit.envoy-gateway-system.svc.cluster.local")
	ctlCert, ctlKey, _ := ca.Issue(t, "envoy-gateway")
	for name, data := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.PEM, "ads.crt": ctlCert, "ads.key": ctlKey} {
		writeFile(t, filepath.Join(e.dir, name), data)
	}
	pair, err := tls.X509KeyPair(ctlCert, ctlKey)
	if err != nil {
		t.Fatal(err)
	}
	e.creds = grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}))
	e.env = map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": filepath.Join(e.dir, "tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": filepath.Join(e.dir, "tls.key"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": filepath.Join(e.dir, "ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway"}
	return e
}

// with is the environment for the ADS server at addr, with extra.
func (e *egXDS) with(addr string, extra map[string]string) map[string]string {
	env := map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": addr}
	for _, m := range []map[string]string{e.env, extra} {
		for k, v := range m {
			env[k] = v
		}
	}
	return env
}

// egRules is a RateLimitConfig of egDomain with n rules as Envoy
// Gateway writes them (a route and its rule below it), each rule's name
// name bytes long.
func egRules(n, name int) *rlsconf.RateLimitConfig {
	c := &rlsconf.RateLimitConfig{Name: egDomain, Domain: egDomain}
	for i := range n {
		route := fmt.Sprintf("httproute/default/backend-%d/rule/0/match/0/www_example_com", i)
		c.Descriptors = append(c.Descriptors, &rlsconf.RateLimitDescriptor{Key: route, Value: route,
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: egRule, Value: egRule, RateLimit: &rlsconf.RateLimitPolicy{
				Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: uint32(10 + i), Name: strings.Repeat("n", name)}}}})
	}
	return c
}

// TestXDSAnswers: every push is answered, over TLS as Envoy Gateway
// serves it, and one past a bound is NACKed naming the setting that
// sets it: more rules than FLOODGATE_CONFIG_MAX_RULES, more memory than
// FLOODGATE_CONFIG_MAX_MEMORY, descriptors nested past 32 levels, more
// bytes than XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES (not read: NACKed on the
// next stream), and a push not in force within
// FLOODGATE_CONFIG_LOAD_TIMEOUT (its time ended by the test, through
// testLoadContext). After each, the configuration before is served and
// the service is healthy; a good push is then ACKed. The time each took
// to be answered is logged, not asserted (TestHeapBoundXDSPushes
// asserts Envoy Gateway's deadlines, without the race detector).
func TestXDSAnswers(t *testing.T) {
	eg := newEGXDS(t)
	ads := startADS(t, "127.0.0.1:0", eg.creds)
	ads.push(t, "envoy-ratelimit", "1", egConfig(10))
	testLoadContext = func(parent context.Context, version string, timeout error) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancelCause(parent)
		if version == "late" {
			cancel(timeout) // its time is up before it is read
		}
		return ctx, func() { cancel(nil) }
	}
	t.Cleanup(func() { testLoadContext = nil })
	a, logs := start(t, eg.with(ads.addr, map[string]string{"FLOODGATE_CONFIG_MAX_RULES": "1000",
		"FLOODGATE_CONFIG_MAX_MEMORY": strconv.Itoa(1 << 20), "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": strconv.Itoa(4 << 20)}))
	waitFor(t, "the first push ACKed", ads.answered(false, "1"))
	c := grpcClient(t, a.grpc)
	served := func(when string) {
		t.Helper()
		if code, left, limit, err := egCall(c); err != nil || limit != 10 || code != pb.RateLimitResponse_OK || left > 9 {
			t.Fatalf("%s: %v %v, %d left of %d; want the first push's rule (10)", when, err, code, left, limit)
		}
		if !healthy(t, a)() {
			t.Fatalf("%s: unhealthy", when)
		}
	}
	served("after the first push")

	deep := &rlsconf.RateLimitConfig{Name: egDomain, Domain: egDomain}
	level := &deep.Descriptors
	for i := range 40 {
		d := &rlsconf.RateLimitDescriptor{Key: fmt.Sprint("k", i), RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}}
		*level = []*rlsconf.RateLimitDescriptor{d}
		level = &d.Descriptors
	}
	for _, p := range []struct {
		version string
		config  *rlsconf.RateLimitConfig
		want    string // what its NACK says
	}{
		{"rules", egRules(1001, 0), "more than 1000 (FLOODGATE_CONFIG_MAX_RULES)"},
		{"memory", egRules(900, 1000), "more than 1048576 bytes (FLOODGATE_CONFIG_MAX_MEMORY)"},
		{"depth", deep, "descriptors nested deeper than 32 levels"},
		{"bytes", egRules(100, 50_000), "4194304) (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"},
		{"late", egConfig(20), "FLOODGATE_CONFIG_LOAD_TIMEOUT"},
	} {
		before := len(ads.nackMessages())
		start := time.Now()
		ads.push(t, "envoy-ratelimit", p.version, p.config)
		waitFor(t, "the push "+p.version+" NACKed, naming its bound", func() bool {
			return strings.Contains(strings.Join(ads.nackMessages()[before:], "\n"), p.want)
		})
		t.Logf("the push %q: NACKed %v after it was set", p.version, time.Since(start).Round(time.Millisecond))
		served("after the push " + p.version)
	}
	ads.push(t, "envoy-ratelimit", "good", egConfig(7))
	waitFor(t, "a good push ACKed after them", ads.answered(false, "good"))
	if _, _, limit, err := egCall(c); err != nil || limit != 7 {
		t.Fatalf("after the good push: %v, limit %d", err, limit)
	}
	if n := strings.Count(logs.String(), "FLOODGATE_CONFIG_LOAD_TIMEOUT"); n != 1 {
		t.Errorf("the push out of time logged %d times, want once", n)
	}
}

// TestConfigBoundsFiles: FLOODGATE_CONFIG_MAX_RULES and
// FLOODGATE_CONFIG_MAX_MEMORY bound a configuration's files too: a
// start on files past one fails, naming it; within both, it serves.
func TestConfigBoundsFiles(t *testing.T) {
	var y strings.Builder
	y.WriteString("domain: api\ndescriptors:\n")
	for i := range 11 {
		fmt.Fprintf(&y, "  - {key: k, value: v%d, rate_limit: {unit: hour, requests_per_unit: 2}}\n", i)
	}
	root := filepath.Join(runtimeDir(t, map[string]string{"a.yaml": y.String()}), "current")
	for bound, env := range map[string]map[string]string{
		"FLOODGATE_CONFIG_MAX_RULES":  {"FLOODGATE_CONFIG_MAX_RULES": "10"},
		"FLOODGATE_CONFIG_MAX_MEMORY": {"FLOODGATE_CONFIG_MAX_MEMORY": "1000"},
	} {
		env["RUNTIME_ROOT"] = root
		for k, v := range map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"} {
			env[k] = v
		}
		if err := run(context.Background(), func(k string) string { return env[k] }, &lockedBuffer{}, nil); err == nil || !strings.Contains(err.Error(), bound) {
			t.Errorf("files past %s: %v", bound, err)
		}
	}
	a, _ := start(t, map[string]string{"RUNTIME_ROOT": root, "FLOODGATE_CONFIG_MAX_RULES": "11"})
	if code, left := xdsCall(t, grpcClient(t, a.grpc), "v3"); code != pb.RateLimitResponse_OK || left != 1 {
		t.Fatalf("files within the bounds: %v, %d left", code, left)
	}
}
