package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testcerts"
	"github.com/floodgate-go/floodgate/rls/internal/peertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// peerModule is the directory whose go.mod pins envoyproxy/ratelimit,
// the reference (its version is named there and in docs/rls.md).
const peerModule = "../../testdata/ratelimit-peer"

// limit is a rate_limit of n a unit.
func limit(n uint32, unit rlsconf.RateLimitUnit) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
}

// sbsConfigs is what the side-by-side test pushes to both services, at
// version v (the probe domain's limit tells which is in force), with
// Envoy Gateway's rule at eg an hour, key k at k a minute, and with
// malformed, a domain that cannot load.
func sbsConfigs(v, eg, k uint32, malformed bool) []*rlsconf.RateLimitConfig {
	probe := &rlsconf.RateLimitConfig{Name: "probe", Domain: "probe", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "version", RateLimit: limit(1_000_000+v, rlsconf.RateLimitUnit_DAY)}}}
	gw := egConfig(eg)
	perUser := limit(3, rlsconf.RateLimitUnit_MINUTE)
	perUser.Name = "per-user"
	gw.Descriptors = append(gw.Descriptors, &rlsconf.RateLimitDescriptor{Key: "x-user-id", RateLimit: perUser})
	named := limit(k, rlsconf.RateLimitUnit_MINUTE)
	named.Name = "k-any"
	small := limit(2, rlsconf.RateLimitUnit_HOUR)
	small.Name = "small"
	replacing := limit(4, rlsconf.RateLimitUnit_HOUR)
	replacing.Replaces = []*rlsconf.RateLimitReplace{{Name: "small"}}
	api := &rlsconf.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", Value: "shadow", ShadowMode: true, RateLimit: limit(1, rlsconf.RateLimitUnit_HOUR)},
		{Key: "k", Value: "free", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		{Key: "k", RateLimit: named},
		{Key: "tier", Value: "gold", DetailedMetric: true, Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "user", RateLimit: limit(2, rlsconf.RateLimitUnit_HOUR)}}},
		{Key: "a", RateLimit: small},
		{Key: "b", RateLimit: replacing},
	}}
	if malformed {
		api.Descriptors = append(api.Descriptors, api.Descriptors[0]) // the same descriptor twice
	}
	return []*rlsconf.RateLimitConfig{probe, gw, api}
}

// version is the configuration version a service has in force, from
// the probe domain's limit.
func version(c pb.RateLimitServiceClient) uint32 {
	resp, err := c.ShouldRateLimit(context.Background(), peertest.Request("probe", 1, "version"))
	if err != nil || len(resp.Statuses) != 1 {
		return 0
	}
	return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() - 1_000_000
}

// TestSideBySideXDS runs floodgate-rls and envoyproxy/ratelimit (built
// from its module at the pinned version) as Envoy Gateway runs its
// rate-limit service: each on a redis-server of its own, configured by
// the same go-control-plane ADS server over TLS 1.3 with client
// certificates, serving gRPC over TLS, with the RateLimit headers and
// dynamic metadata on. Both are pushed the same configurations and sent
// the same requests over TLS, and must give the same answer to each:
// codes, counts, limits and names, resets, headers and metadata. The
// run covers Envoy Gateway's own rule shape, named limits, shadow mode,
// unlimited rules, nested descriptors, replaces, several descriptors and
// hits_addend in one request, unknown domains and keys; a push that
// lowers two limits part-way through their windows; and a push that
// cannot load, which both NACK, still serving the one before. Both
// refuse a plaintext client.
//
// The two get different node ids (Envoy Gateway gives every replica the
// same one) so that the test can tell whose NACK it sees.
func TestSideBySideXDS(t *testing.T) {
	bin := peertest.Build(t, peerModule)
	certs := t.TempDir()
	ca := testcerts.NewCA(t, "envoy-gateway")
	cert, key, _ := ca.Issue(t, "envoy-ratelimit.envoy-gateway-system.svc.cluster.local", "ratelimit.test")
	writeFile(t, filepath.Join(certs, "tls.crt"), cert)
	writeFile(t, filepath.Join(certs, "tls.key"), key)
	writeFile(t, filepath.Join(certs, "ca.crt"), ca.PEM)
	ctlCert, ctlKey, _ := ca.Issue(t, "envoy-gateway")
	pair, err := tls.X509KeyPair(ctlCert, ctlKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	ads := startADS(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS13})))
	const ours, theirs = "envoy-ratelimit", "envoy-ratelimit-reference"
	push := func(v string, configs []*rlsconf.RateLimitConfig) {
		ads.push(t, ours, v, configs...)
		ads.push(t, theirs, v, configs...)
	}
	push("0", sbsConfigs(0, 10, 5, false))

	// Envoy Gateway's environment, and the settings the comparison needs
	// (the RateLimit headers, dynamic metadata, no increment over the
	// limit, no expiry jitter). envoyproxy/ratelimit verifies clients
	// with GRPC_CLIENT_TLS_CACERT and ignores GRPC_SERVER_TLS_CA_CERT,
	// which Envoy Gateway sets; both get both, so both verify.
	env := map[string]string{
		"RUNTIME_ROOT": t.TempDir(), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ads.addr,
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": filepath.Join(certs, "tls.crt"),
		"GRPC_SERVER_TLS_KEY": filepath.Join(certs, "tls.key"), "GRPC_SERVER_TLS_CA_CERT": filepath.Join(certs, "ca.crt"),
		"GRPC_CLIENT_TLS_CACERT":         filepath.Join(certs, "ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": filepath.Join(certs, "tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": filepath.Join(certs, "tls.key"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": filepath.Join(certs, "ca.crt"),
		"REDIS_SOCKET_TYPE":              "tcp",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "RESPONSE_DYNAMIC_METADATA": "true",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "EXPIRATION_JITTER_MAX_SECONDS": "0",
	}
	proxyCert, proxyKey, _ := ca.Issue(t, "envoy")
	proxy := func() grpc.DialOption {
		pair, err := tls.X509KeyPair(proxyCert, proxyKey)
		if err != nil {
			t.Fatal(err)
		}
		return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "ratelimit.test", Certificates: []tls.Certificate{pair}}))
	}

	ourRedis, theirRedis := redistest.Start(t), redistest.Start(t)
	ourEnv := map[string]string{"CONFIG_GRPC_XDS_NODE_ID": ours, "REDIS_URL": ourRedis.Addr}
	for k, v := range env {
		ourEnv[k] = v
	}
	a, _ := start(t, ourEnv)
	fg := tlsClient(t, a.grpc, ca, proxyCert, proxyKey)

	grpcAddr := freeAddr(t)
	_, grpcPort, _ := strings.Cut(grpcAddr, ":")
	theirEnv := []string{"CONFIG_GRPC_XDS_NODE_ID=" + theirs, "REDIS_URL=" + theirRedis.Addr,
		"HOST=127.0.0.1", "PORT=" + strings.Split(freeAddr(t), ":")[1], "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strings.Split(freeAddr(t), ":")[1]}
	for k, v := range env {
		theirEnv = append(theirEnv, k+"="+v)
	}
	proc := peertest.Start(t, bin, theirEnv...)
	ref := proc.Dial(t, grpcAddr, peertest.Request("probe", 1, "version"), proxy())
	waitFor(t, "both services on the first push", func() bool { return version(fg) == 0 && version(ref) == 0 })

	// Both refuse a plaintext client.
	for name, addr := range map[string]string{"floodgate-rls": a.grpc, "envoyproxy/ratelimit": grpcAddr} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), egRequest); err == nil {
			t.Errorf("%s served a plaintext client", name)
		}
		conn.Close()
	}

	before := [][]*pb.RateLimitRequest{
		peertest.Times(4, egRequest),
		peertest.Times(4, peertest.Request(egDomain, 0, "x-user-id=alice")),
		{peertest.Request(egDomain, 0, egRoute+"="+egRoute+","+egRule+"="+egRule, "x-user-id=bob")},
		peertest.Times(2, peertest.Request("api", 0, "k=shadow")),
		peertest.Times(2, peertest.Request("api", 0, "k=free")),
		peertest.Times(6, peertest.Request("api", 0, "k=x")),
		peertest.Times(2, peertest.Request("api", 3, "k=y")),
		peertest.Times(3, peertest.Request("api", 0, "tier=gold,user=u1")),
		{peertest.Request("api", 0, "tier=silver,user=u1"), peertest.Request("api", 0, "nothing=here"), peertest.Request("nope", 0, "k=x")},
		peertest.Times(5, peertest.Request("api", 0, "a=1", "b=1")),
		peertest.Times(3, peertest.Request("api", 0, "a=2")),
		{peertest.Request("api", 1, "k=z", "k=free", "a=3")},
	}
	// After a push that lowers Envoy Gateway's rule from 10 to 6 an hour
	// with 4 spent, and k from 5 to 3 a minute with 5 spent on k=x.
	after := [][]*pb.RateLimitRequest{
		peertest.Times(4, egRequest),
		peertest.Times(2, peertest.Request("api", 0, "k=x")),
		peertest.Times(4, peertest.Request("api", 0, "k=w")),
		peertest.Times(3, peertest.Request(egDomain, 0, "x-user-id=alice")),
	}
	// After a push that cannot load.
	refused := [][]*pb.RateLimitRequest{
		{egRequest, peertest.Request("api", 0, "k=w"), peertest.Request("api", 0, "a=1", "b=1")},
	}

	compare := func(phase string, seqs [][]*pb.RateLimitRequest) (diffs []string) {
		for s, seq := range seqs {
			for i, req := range seq {
				r1, err1 := ref.ShouldRateLimit(context.Background(), req)
				r2, err2 := fg.ShouldRateLimit(context.Background(), req)
				if err1 != nil || err2 != nil {
					diffs = append(diffs, fmt.Sprintf("%s, sequence %d, request %d: envoyproxy/ratelimit %v, floodgate %v", phase, s, i, err1, err2))
					continue
				}
				if x, y := peertest.Answer(r1), peertest.Answer(r2); x != y {
					diffs = append(diffs, fmt.Sprintf("%s, sequence %d, request %d:\n  envoyproxy/ratelimit %s\n  floodgate            %s", phase, s, i, x, y))
				}
			}
		}
		return diffs
	}
	applied := func(what string, v uint32) {
		waitFor(t, what, func() bool { return version(fg) == v && version(ref) == v })
	}

	// A run must fall within one second of the Unix clock, for the
	// resets to read alike; one that crossed a second runs again, on new
	// versions, from empty counts.
	for attempt := 1; ; attempt++ {
		v := uint32(attempt * 10)
		push(fmt.Sprint(v), sbsConfigs(v, 10, 5, false))
		applied("the first push", v)
		ourRedis.Flush()
		theirRedis.Flush()
		nacks := ads.nacks(ours) + ads.nacks(theirs)
		sec := time.Now().Unix()
		diffs := compare("before", before)
		push(fmt.Sprint(v+1), sbsConfigs(v+1, 6, 3, false))
		applied("the lower limits", v+1)
		diffs = append(diffs, compare("after the lower limits", after)...)
		push(fmt.Sprint(v+2), sbsConfigs(v+2, 100, 100, true))
		waitFor(t, "both NACK the push that cannot load", func() bool { return ads.nacks(ours)+ads.nacks(theirs) >= nacks+2 })
		if version(fg) != v+1 || version(ref) != v+1 {
			t.Fatalf("after a NACKed push: floodgate-rls serves version %d, envoyproxy/ratelimit %d; want both %d", version(fg), version(ref), v+1)
		}
		diffs = append(diffs, compare("after the refused push", refused)...)
		// The difference docs/rls.md names: with
		// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, a shadow rule over its
		// limit keeps envoyproxy/ratelimit from counting the request's
		// other descriptors; floodgate-rls counts them, as a shadow rule
		// enforces nothing.
		mixed := peertest.Request("api", 0, "k=shadow", "k=v")
		r1, err1 := ref.ShouldRateLimit(context.Background(), mixed)
		r2, err2 := fg.ShouldRateLimit(context.Background(), mixed)
		if err1 != nil || err2 != nil || r1.Statuses[1].LimitRemaining != 3 || r2.Statuses[1].LimitRemaining != 2 {
			diffs = append(diffs, fmt.Sprintf("a shadow rule over its limit beside k=v: envoyproxy/ratelimit %v %s, floodgate %v %s; want k=v uncounted there (3 left of 3), counted here (2)",
				err1, peertest.Answer(r1), err2, peertest.Answer(r2)))
		}
		if time.Now().Unix() != sec {
			if attempt < 10 {
				continue
			}
			t.Fatal("every attempt crossed a second")
		}
		t.Logf("NACKs of the refused push: floodgate-rls %d, envoyproxy/ratelimit %d", ads.nacks(ours), ads.nacks(theirs))
		if len(diffs) > 0 {
			var logs []string
			for _, l := range strings.Split(proc.Logs(), "\n") {
				if !strings.Contains(l, "gostats") { // the stats it would send, one a request
					logs = append(logs, l)
				}
			}
			t.Fatalf("the services differ:\n%s\nenvoyproxy/ratelimit's log:\n%s", strings.Join(diffs, "\n"), strings.Join(logs, "\n"))
		}
		t.Logf("the same answers to %d requests, on attempt %d", count(before)+count(after)+count(refused), attempt)
		return
	}
}

func count(seqs [][]*pb.RateLimitRequest) int {
	n := 0
	for _, s := range seqs {
		n += len(s)
	}
	return n
}
