package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testcerts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// egDomain, egRoute and egRule are a BackendTrafficPolicy's rule as Envoy
// Gateway's translator writes it: a domain per listener, a descriptor
// per route rule and match, and the rule's own below it.
const (
	egDomain = "default/eg/http"
	egRoute  = "httproute/default/backend/rule/0/match/0/www_example_com"
	egRule   = "rule-0-match-0"
)

// egConfig is the RateLimitConfig Envoy Gateway pushes for egDomain,
// with the rule's limit of n an hour.
func egConfig(n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: egDomain, Domain: egDomain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: egRoute, Value: egRoute,
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: egRule, Value: egRule,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: n}}}}}}
}

var egRequest = &pb.RateLimitRequest{Domain: egDomain, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
	{Key: egRoute, Value: egRoute}, {Key: egRule, Value: egRule}}}}}

// egCall asks as Envoy does under Envoy Gateway, and returns the code,
// what is left and the limit in force.
func egCall(c pb.RateLimitServiceClient) (pb.RateLimitResponse_Code, uint32, uint32, error) {
	resp, err := c.ShouldRateLimit(context.Background(), egRequest)
	if err != nil {
		return 0, 0, 0, err
	}
	return resp.OverallCode, resp.Statuses[0].LimitRemaining, resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(), nil
}

// freeAddr is a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestEnvoyGateway runs floodgate-rls as Envoy Gateway's ratelimit
// Deployment runs envoyproxy/ratelimit: its exact environment, ports
// and paths aside, on a redis-server, with the configuration pushed by
// go-control-plane's ADS server and snapshot cache over TLS 1.3 that
// requires a client certificate, and gRPC served over TLS to clients
// that show one. It serves the pushed configuration; refuses a
// plaintext client and one without a certificate; after a push that
// lowers the limit mid-run, exactly the difference passes; after a push
// that cannot load, the one before is still served; and while the
// certificates are rotated (once whole, once caught half-written), every
// call succeeds, and new connections get the new certificate.
func TestEnvoyGateway(t *testing.T) {
	redis := redistest.Start(t)
	certs := t.TempDir() // the envoy-rate-limit secret: tls.crt, tls.key, ca.crt
	ca := testcerts.NewCA(t, "envoy-gateway")
	cert, key, _ := ca.Issue(t, "envoy-ratelimit.envoy-gateway-system.svc.cluster.local", "ratelimit.test")
	writeFile(t, filepath.Join(certs, "tls.crt"), cert)
	writeFile(t, filepath.Join(certs, "tls.key"), key)
	writeFile(t, filepath.Join(certs, "ca.crt"), ca.PEM)
	// Envoy Gateway's controller: the ADS server, TLS 1.3, client
	// certificates of its CA required.
	ctlCert, ctlKey, _ := ca.Issue(t, "envoy-gateway")
	pair, err := tls.X509KeyPair(ctlCert, ctlKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	ads := startADS(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS13})))
	ads.push(t, "envoy-ratelimit", "1", egConfig(10))

	old := tlsCheckEvery
	tlsCheckEvery = 0 // every handshake looks at the files: the test rotates them at once
	t.Cleanup(func() { tlsCheckEvery = old })
	data := t.TempDir()
	mapper := filepath.Join(t.TempDir(), "prometheus-mapper.yaml")
	if err := os.WriteFile(mapper, []byte("mappings: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t)
	// Envoy Gateway's environment (internal/infrastructure/kubernetes/
	// ratelimit/resource.go), with Redis and Prometheus as its settings
	// add them; the ports are the system's and the paths the test's.
	env := map[string]string{
		"RUNTIME_ROOT": data, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr, "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": filepath.Join(certs, "tls.crt"),
		"GRPC_SERVER_TLS_KEY": filepath.Join(certs, "tls.key"), "GRPC_SERVER_TLS_CA_CERT": filepath.Join(certs, "ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": filepath.Join(certs, "tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": filepath.Join(certs, "tls.key"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": filepath.Join(certs, "ca.crt"),
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redis.Addr,
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": promAddr, "PROMETHEUS_MAPPER_YAML": mapper,
	}
	a, logs := start(t, env)
	waitFor(t, "healthy once the first push is in force", healthy(t, a))

	// Envoy's proxies show a certificate of the same CA.
	proxyCert, proxyKey, _ := ca.Issue(t, "envoy")
	envoy := tlsClient(t, a.grpc, ca, proxyCert, proxyKey)
	for i := range 4 {
		code, left, limit, err := egCall(envoy)
		if err != nil || code != pb.RateLimitResponse_OK || left != uint32(9-i) || limit != 10 {
			t.Fatalf("call %d of the pushed rule: %v %v, %d left of %d", i, err, code, left, limit)
		}
	}

	// A plaintext client, and one with no certificate, are refused.
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, _, _, err := egCall(pb.NewRateLimitServiceClient(conn)); err == nil {
		t.Error("a plaintext client was served")
	}
	if _, _, _, err := egCall(tlsClient(t, a.grpc, ca, nil, nil)); err == nil {
		t.Error("a client with no certificate was served")
	}

	// A lower limit mid-run: 4 of 10 spent, the limit lowered to 6,
	// exactly 2 more pass.
	ads.push(t, "envoy-ratelimit", "2", egConfig(6))
	waitFor(t, "the lower limit ACKed", ads.answered(false, "2"))
	passed := 0
	for range 5 {
		code, _, limit, err := egCall(envoy)
		if err != nil || limit != 6 {
			t.Fatalf("after the lower limit: %v, limit %d", err, limit)
		}
		if code == pb.RateLimitResponse_OK {
			passed++
		}
	}
	if passed != 2 {
		t.Fatalf("%d passed after the limit went from 10 to 6 with 4 spent, want exactly 2", passed)
	}

	// A push that cannot load: NACKed, and the one before is served.
	bad := egConfig(100)
	bad.Descriptors = append(bad.Descriptors, bad.Descriptors[0]) // the same descriptor twice
	ads.push(t, "envoy-ratelimit", "3", bad)
	waitFor(t, "the bad push NACKed", ads.answered(true, ""))
	if code, left, limit, err := egCall(envoy); err != nil || code != pb.RateLimitResponse_OVER_LIMIT || left != 0 || limit != 6 {
		t.Fatalf("after the refused push: %v %v, %d left of %d; want the limit of 6, spent", err, code, left, limit)
	}
	if !strings.Contains(logs.String(), "appears twice") {
		t.Errorf("the refused push is not in the log:\n%s", logs)
	}

	// Rotation: calls keep coming, on the connection they have and on new
	// ones, while the secret's files are rewritten: once half-written
	// (a truncated certificate), then whole.
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var serials sync.Map
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := envoy
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%5 == 4 {
				c = tlsClient(t, a.grpc, ca, proxyCert, proxyKey) // a new connection: a new handshake
			}
			sn, err := ask(c)
			calls.Add(1)
			if err != nil {
				failed.Add(1)
				t.Logf("a call during the rotation: %v", err)
			}
			serials.Store(sn, true)
		}
	}()
	cert2, key2, sn2 := ca.Issue(t, "envoy-ratelimit.envoy-gateway-system.svc.cluster.local", "ratelimit.test")
	if err := os.WriteFile(filepath.Join(certs, "tls.crt"), cert2[:len(cert2)/2], 0o644); err != nil { // caught half-written
		t.Fatal(err)
	}
	for n := calls.Load(); calls.Load() < n+20; {
		time.Sleep(5 * time.Millisecond)
	}
	writeFile(t, filepath.Join(certs, "tls.key"), key2)
	writeFile(t, filepath.Join(certs, "tls.crt"), cert2)
	waitFor(t, "a new connection with the new certificate", func() bool { _, ok := serials.Load(sn2); return ok })
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || calls.Load() < 20 {
		t.Fatalf("%d of %d calls failed during the rotation", failed.Load(), calls.Load())
	}

	// The xDS stream, broken, comes back with the new client certificate,
	// and takes a push.
	ads.gs.Stop()
	ads2 := startADS(t, ads.addr, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})))
	ads2.push(t, "envoy-ratelimit", "4", egConfig(8))
	waitFor(t, "a push after the server came back", func() bool { _, _, limit, err := egCall(envoy); return err == nil && limit == 8 })

	// The series Envoy Gateway's dashboards read, on PROMETHEUS_ADDR.
	_, body := get(t, "http://"+promAddr+"/metrics")
	for _, want := range []string{"ratelimit_service_rate_limit_over_limit", "ratelimit_service_config_load_success", "ratelimit_service_config_load_error 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics on PROMETHEUS_ADDR has no %s", want)
		}
	}
}
