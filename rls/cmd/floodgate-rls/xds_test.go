package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/testcerts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// adsServer is go-control-plane's ADS server on a snapshot cache, as
// Envoy Gateway runs it for its rate-limit service, on loopback, with
// what its clients sent.
type adsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	gs    *grpc.Server

	mu       sync.Mutex
	requests []*discoveryv3.DiscoveryRequest
	streams  []int64          // the stream of each request
	nodes    map[int64]string // each stream's node, from its first request
	headers  []metadata.MD
}

// startADS starts an ADS server on addr ("127.0.0.1:0" for any port),
// with opts (its credentials), until the test ends.
func startADS(t *testing.T, addr string, opts ...grpc.ServerOption) *adsServer {
	t.Helper()
	a := &adsServer{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), nodes: map[int64]string{}}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			a.mu.Lock()
			a.headers = append(a.headers, md)
			a.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(stream int64, r *discoveryv3.DiscoveryRequest) error {
			a.mu.Lock()
			a.requests = append(a.requests, r)
			a.streams = append(a.streams, stream)
			if id := r.GetNode().GetId(); id != "" {
				a.nodes[stream] = id
			}
			a.mu.Unlock()
			return nil
		},
	}
	a.gs = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(a.gs, serverv3.NewServer(context.Background(), a.cache, cb))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	a.addr = ln.Addr().String()
	go a.gs.Serve(ln)
	t.Cleanup(a.gs.Stop)
	return a
}

// push sets the node's snapshot at version v, of configs.
func (a *adsServer) push(t *testing.T, node, v string, configs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(configs))
	for i, c := range configs {
		rs[i] = c
	}
	snap, err := cachev3.NewSnapshot(v, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// answered reports whether a client answered version v: ACKed it (the
// version in force, no error), or NACKed it (an error, with the version
// before).
func (a *adsServer) answered(nack bool, version string) func() bool {
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, r := range a.requests {
			if nack && r.ErrorDetail != nil && r.ResponseNonce != "" {
				return true
			}
			if !nack && r.ErrorDetail == nil && r.VersionInfo == version {
				return true
			}
		}
		return false
	}
}

// nacks is how many NACKs the clients of node have sent.
func (a *adsServer) nacks(node string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for i, r := range a.requests {
		if r.ErrorDetail != nil && a.nodes[a.streams[i]] == node {
			n++
		}
	}
	return n
}

// nackMessages are the NACKs' messages.
func (a *adsServer) nackMessages() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.requests {
		if r.ErrorDetail != nil {
			out = append(out, r.ErrorDetail.Message)
		}
	}
	return out
}

// apiConfig is a RateLimitConfig of domain api: key k, n an hour.
func xdsConfig(n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: n}}}}
}

// xdsCall asks for key k=v of domain api and returns the code and what
// remains.
func xdsCall(t *testing.T, c pb.RateLimitServiceClient, v string) (pb.RateLimitResponse_Code, uint32) {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "api",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: v}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode, resp.Statuses[0].LimitRemaining
}

func grpcClient(t *testing.T, addr string) pb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

// healthy reports whether /healthcheck answers 200.
func healthy(t *testing.T, a addrs) func() bool {
	return func() bool { code, _ := get(t, "http://"+a.http+"/healthcheck"); return code == 200 }
}

// TestXDS: CONFIG_TYPE=GRPC_XDS_SOTW as Envoy Gateway sets it. The
// service serves before the first push, unhealthy, and healthy once it
// is in force; each push replaces the configuration through the path of
// a file reload (a key keeps its count) and is ACKed; a push that does
// not load is NACKed, and the configuration before stays; the node's id
// and metadata and the additional headers reach the server.
func TestXDS(t *testing.T) {
	ads := startADS(t, "127.0.0.1:0")
	a, logs := start(t, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr,
		"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,team=edge",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "X-Token:secret,x-other:1",
		"FORCE_START_WITHOUT_INITIAL_CONFIG":        "true", "RUNTIME_ROOT": "/nonexistent"})
	if healthy(t, a)() {
		t.Fatal("healthy before the first push")
	}
	c := grpcClient(t, a.grpc)

	ads.push(t, "envoy-ratelimit", "1", xdsConfig(2))
	waitFor(t, "the first push ACKed", ads.answered(false, "1"))
	waitFor(t, "healthy once the first push is in force", healthy(t, a))
	for i, want := range []uint32{1, 0} {
		if code, left := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK || left != want {
			t.Fatalf("call %d: %v, %d left; want OK, %d", i, code, left, want)
		}
	}
	if code, _ := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the third call of two: %v", code)
	}

	// A raised limit: the key keeps its count and what it owes, as a
	// file reload keeps it; a fresh key gets the new limit.
	ads.push(t, "envoy-ratelimit", "2", xdsConfig(3))
	waitFor(t, "the second push ACKed", ads.answered(false, "2"))
	if code, left := xdsCall(t, c, "w"); code != pb.RateLimitResponse_OK || left != 2 {
		t.Fatalf("a fresh key under the second push: %v, %d left; want OK, 2", code, left)
	}
	if code, _ := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the spent key gained allowance from the push: %v", code)
	}

	// Pushes that do not load: NACKed, with why; the second push stays.
	bad := xdsConfig(5)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	ads.push(t, "envoy-ratelimit", "3", bad)
	waitFor(t, "the bad push NACKed", ads.answered(true, ""))
	meta := xdsConfig(5) // metadata (8), of envoyproxy/ratelimit's main after the pinned version
	meta.Descriptors[0].ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), nil))
	ads.push(t, "envoy-ratelimit", "4", meta)
	waitFor(t, "the metadata push NACKed", func() bool {
		return strings.Contains(strings.Join(ads.nackMessages(), "\n"), "metadata is not implemented")
	})
	if code, left := xdsCall(t, c, "x"); code != pb.RateLimitResponse_OK || left != 2 {
		t.Fatalf("after the refused pushes: %v, %d left; want OK, 2 (the second push's rule)", code, left)
	}
	if !healthy(t, a)() {
		t.Error("unhealthy after a refused push: the configuration before is in force")
	}
	if !strings.Contains(logs.String(), "unknown unit") {
		t.Errorf("the refused push is not in the log:\n%s", logs)
	}
	if !metricLine(t, a, `ratelimit_service_config_load_error 2`) {
		t.Error("the refused pushes are not counted as config_load_error")
	}

	ads.mu.Lock()
	defer ads.mu.Unlock()
	n := ads.requests[0].GetNode()
	if n.GetId() != "envoy-ratelimit" || n.GetMetadata().GetFields()["zone"].GetStringValue() != "a" || n.GetMetadata().GetFields()["team"].GetStringValue() != "edge" {
		t.Errorf("the node: %v", n)
	}
	if md := ads.headers[0]; len(md.Get("x-token")) != 1 || md.Get("x-token")[0] != "secret" || md.Get("x-other")[0] != "1" {
		t.Errorf("the stream's headers: %v", md)
	}
}

// TestXDSWaitsForFirstPush: without FORCE_START_WITHOUT_INITIAL_CONFIG,
// nothing listens until the first push is in force, as with
// envoyproxy/ratelimit.
func TestXDSWaitsForFirstPush(t *testing.T) {
	ads := startADS(t, "127.0.0.1:0")
	env := map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr,
		"CONFIG_GRPC_XDS_NODE_ID": "n"}
	ready := make(chan addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, &lockedBuffer{}, func(a addrs) { ready <- a })
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, "the client's first request", func() bool { ads.mu.Lock(); defer ads.mu.Unlock(); return len(ads.requests) > 0 })
	select {
	case <-ready:
		t.Fatal("listening before the first push")
	default:
	}
	ads.push(t, "n", "1", xdsConfig(2))
	a := <-ready
	if code, left := xdsCall(t, grpcClient(t, a.grpc), "v"); code != pb.RateLimitResponse_OK || left != 1 {
		t.Fatalf("the first call: %v, %d left", code, left)
	}
}

// TestXDSReconnect: a configuration server that goes away leaves the
// configuration in force, and a server that comes back at the address is
// reached again after the backoff, and its push applied.
func TestXDSReconnect(t *testing.T) {
	ads := startADS(t, "127.0.0.1:0")
	a, _ := start(t, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr,
		"CONFIG_GRPC_XDS_NODE_ID": "n", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "50ms"})
	c := grpcClient(t, a.grpc)
	ads.push(t, "n", "1", xdsConfig(2))
	waitFor(t, "the first push ACKed", ads.answered(false, "1"))
	ads.gs.Stop()
	if code, left := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK || left != 1 {
		t.Fatalf("with the server gone: %v, %d left; want the pushed rule", code, left)
	}
	again := startADS(t, ads.addr)
	again.push(t, "n", "7", xdsConfig(10))
	waitFor(t, "the new server's push ACKed", again.answered(false, "7"))
	if code, left := xdsCall(t, c, "fresh"); code != pb.RateLimitResponse_OK || left != 9 {
		t.Fatalf("after the server came back: %v, %d left; want 9", code, left)
	}
}

// TestXDSTLS: the configuration server reached over TLS 1.3 with a
// client certificate, as Envoy Gateway's requires, its certificate
// verified by the CA file and CONFIG_GRPC_XDS_SERVER_TLS_SAN; the CA
// file is read again when it changes.
func TestXDSTLS(t *testing.T) {
	old := tlsCheckEvery
	tlsCheckEvery = 0 // every handshake looks at the files: the test rotates them at once
	t.Cleanup(func() { tlsCheckEvery = old })
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	srvCert, srvKey, _ := ca.Issue(t, "envoy-gateway")
	cliCert, cliKey, _ := ca.Issue(t, "envoy-ratelimit")
	writeFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	writeFile(t, filepath.Join(dir, "tls.crt"), cliCert)
	writeFile(t, filepath.Join(dir, "tls.key"), cliKey)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	ads := startADS(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})))
	ads.push(t, "n", "1", xdsConfig(2))
	base := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr, "CONFIG_GRPC_XDS_NODE_ID": "n",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": filepath.Join(dir, "ca.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": filepath.Join(dir, "tls.crt"), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": filepath.Join(dir, "tls.key"),
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway"}
	a, _ := start(t, base) // no FORCE_START: it listens once the push is in force
	if code, left := xdsCall(t, grpcClient(t, a.grpc), "v"); code != pb.RateLimitResponse_OK || left != 1 {
		t.Fatalf("over TLS: %v, %d left", code, left)
	}

	// A server whose certificate is not for the name is not trusted.
	wrong := startADS(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13})))
	wrong.push(t, "n", "1", xdsConfig(2))
	base["CONFIG_GRPC_XDS_SERVER_URL"], base["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = wrong.addr, "someone-else"
	base["FORCE_START_WITHOUT_INITIAL_CONFIG"], base["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"] = "true", "10ms"
	b, logs := start(t, base)
	waitFor(t, "a word of the server's certificate", func() bool { return strings.Contains(logs.String(), "someone-else") })
	if healthy(t, b)() {
		t.Fatal("took a push from a server whose certificate is for another name")
	}

	// A server whose certificate is of another CA is not trusted, until
	// the CA file holds that CA: it is read again, with no restart.
	ca2 := testcerts.NewCA(t, "ca2")
	srv2Cert, srv2Key, _ := ca2.Issue(t, "envoy-gateway")
	pair2, err := tls.X509KeyPair(srv2Cert, srv2Key)
	if err != nil {
		t.Fatal(err)
	}
	rotated := startADS(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair2},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})))
	rotated.push(t, "n", "1", xdsConfig(2))
	base["CONFIG_GRPC_XDS_SERVER_URL"], base["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = rotated.addr, "envoy-gateway"
	r, rlogs := start(t, base)
	waitFor(t, "the other CA's certificate refused", func() bool { return strings.Contains(rlogs.String(), "unknown authority") })
	if healthy(t, r)() {
		t.Fatal("took a push from a server whose certificate is of a CA not in the file")
	}
	writeFile(t, filepath.Join(dir, "ca.crt"), ca2.PEM)
	waitFor(t, "the push of the server of the new CA in force", healthy(t, r))
	if !strings.Contains(rlogs.String(), "the xDS server's CA: the files changed") {
		t.Errorf("the CA's reload is not in the log:\n%s", rlogs)
	}
}

// TestXDSSettings: xDS settings that cannot work stop the start, naming
// them; ones that do nothing are named in a warning.
func TestXDSSettings(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"bad headers":   {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "novalue"},
		"bad backoff":   {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "0s"},
		"max below":     {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1m", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "1s"},
		"bad factor":    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "-1"},
		"bad size":      {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "big"},
		"bad rules":     {"FLOODGATE_CONFIG_MAX_RULES": "0"},
		"bad memory":    {"FLOODGATE_CONFIG_MAX_MEMORY": "1GiB"},
		"no time":       {"FLOODGATE_CONFIG_LOAD_TIMEOUT": "0s"},
		"bad time":      {"FLOODGATE_CONFIG_LOAD_TIMEOUT": "soon"},
		"half a client": {"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "tls.crt"},
		"bad type":      {"CONFIG_TYPE": "GRPC_XDS_DELTA"},
	} {
		full := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}
		for k, v := range env {
			full[k] = v
		}
		_, err := readSettings(func(k string) string { return full[k] })
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		for k := range env {
			if !strings.Contains(err.Error(), k) && k != "CONFIG_GRPC_XDS_SERVER_USE_TLS" {
				t.Errorf("%s: %v does not name %s", name, err, k)
			}
		}
	}
	s, err := readSettings(func(k string) string {
		return map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "a=1,key1:val1",
			"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3s", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "x"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(s.warnings, "\n")
	for _, want := range []string{"key1:val1", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"} {
		if !strings.Contains(w, want) {
			t.Errorf("no warning names %s: %q", want, s.warnings)
		}
	}
	if s.xds.nodeMeta["a"] != "1" || len(s.xds.nodeMeta) != 1 || s.xds.nodeID != "default" || s.xds.url != "localhost:18000" {
		t.Errorf("defaults and metadata: %+v", s.xds)
	}
	// The bounds on a push: their defaults, and as set.
	if s.load.MaxRules != 1_000_000 || s.load.MaxMemory != 128<<20 || s.xds.loadTimeout != 8*time.Second || s.xds.maxMsg != 128<<20 {
		t.Errorf("the bounds' defaults: %d rules, %d bytes kept, %v, %d bytes read", s.load.MaxRules, s.load.MaxMemory, s.xds.loadTimeout, s.xds.maxMsg)
	}
	for env, want := range map[string]int{"FLOODGATE_CONFIG_MAX_BYTES=1000": 1000, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=5000": 5000, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=0": 128 << 20} {
		k, v, _ := strings.Cut(env, "=")
		s, err := readSettings(func(n string) string { return map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", k: v}[n] })
		if err != nil || s.xds.maxMsg != want {
			t.Errorf("%s: %v, gRPC reads at most %d bytes; want %d", env, err, s.xds.maxMsg, want)
		}
	}
	s, err = readSettings(func(n string) string {
		return map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "FLOODGATE_CONFIG_MAX_RULES": "2000000", "FLOODGATE_CONFIG_MAX_MEMORY": "1073741824",
			"FLOODGATE_CONFIG_LOAD_TIMEOUT": "9s"}[n]
	})
	if err != nil || s.load.MaxRules != 2_000_000 || s.load.MaxMemory != 1<<30 || s.xds.loadTimeout != 9*time.Second {
		t.Errorf("the bounds raised: %v, %d rules, %d bytes, %v", err, s.load.MaxRules, s.load.MaxMemory, s.xds.loadTimeout)
	}
	for n, want := range map[int]float64{0: 10, 1: 10, 5: 10} { // factor 0.5: always the initial wait
		if got := s.xds.backoff.wait(n).Seconds(); got != want {
			t.Errorf("wait %d: %vs, want %vs", n, got, want)
		}
	}
	b := backoff{initial: 1e9, max: 8e9, factor: 2}
	for n, want := range map[int]float64{0: 1, 1: 2, 2: 4, 3: 8, 10: 8} {
		if got := b.wait(n).Seconds(); got != want {
			t.Errorf("factor 2, wait %d: %vs, want %vs", n, got, want)
		}
	}
}

// TestXDSMaxMessage: a push above XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES is
// not read: the stream breaks, nothing is applied, and the next stream
// NACKs it at once, naming the setting; then once a second, logged once.
func TestXDSMaxMessage(t *testing.T) {
	ads := startADS(t, "127.0.0.1:0")
	big := xdsConfig(2)
	for i := range 100 {
		big.Descriptors = append(big.Descriptors, &rlsconf.RateLimitDescriptor{Key: strings.Repeat("k", 50) + string(rune('a'+i%26)) + strings.Repeat("x", i)})
	}
	ads.push(t, "n", "1", big)
	a, logs := start(t, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr,
		"CONFIG_GRPC_XDS_NODE_ID": "n", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1000",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10ms"})
	waitFor(t, "the stream broken on the push's size", func() bool { return strings.Contains(logs.String(), "larger than max") })
	waitFor(t, "the push NACKed on the next stream", func() bool {
		return strings.Contains(strings.Join(ads.nackMessages(), "\n"), "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
	})
	if healthy(t, a)() {
		t.Fatal("a push above the size was applied")
	}
	waitFor(t, "a second NACK", func() bool { return len(ads.nackMessages()) >= 2 })
	if n := strings.Count(logs.String(), "larger than max"); n != 1 {
		t.Errorf("the push too large logged %d times, want once:\n%s", n, logs)
	}
}

// TestMergeDomainConfig: MERGE_DOMAIN_CONFIG=true merges a domain that
// two files, or two resources of a push, hold; without it, the files do
// not load and the push is NACKed.
func TestMergeDomainConfig(t *testing.T) {
	files := map[string]string{
		"a.yaml": "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
		"b.yaml": "domain: api\ndescriptors:\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"}
	root := runtimeDir(t, files)
	env := map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}
	if err := run(context.Background(), func(k string) string { return env[k] }, &lockedBuffer{}, nil); err == nil || !strings.Contains(err.Error(), "MERGE_DOMAIN_CONFIG") {
		t.Fatalf("a domain in two files, not merged: %v", err)
	}
	a, _ := start(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "MERGE_DOMAIN_CONFIG": "true"})
	c := grpcClient(t, a.grpc)
	if code, left := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK || left != 1 {
		t.Fatalf("the first file's rule: %v, %d left", code, left)
	}
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "api",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "j", Value: "v"}}}}})
	if err != nil || resp.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("the second file's rule: %v, %v", resp, err)
	}

	second := &rlsconf.RateLimitConfig{Name: "api-2", Domain: "api", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "j", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 5}}}}
	for _, merge := range []string{"false", "true"} {
		ads := startADS(t, "127.0.0.1:0")
		ads.push(t, "n", "1", xdsConfig(2), second)
		start(t, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr,
			"CONFIG_GRPC_XDS_NODE_ID": "n", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "MERGE_DOMAIN_CONFIG": merge})
		waitFor(t, "the push answered", func() bool { return ads.answered(true, "")() || ads.answered(false, "1")() })
		if acked := ads.answered(false, "1")(); acked != (merge == "true") {
			t.Errorf("MERGE_DOMAIN_CONFIG=%s: ACKed %v (NACKs %q)", merge, acked, ads.nackMessages())
		}
	}
}
