package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/testcerts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// writeFile writes data to path whole: to a temporary name, renamed in.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsClient dials addr over TLS, trusting ca, with the client
// certificate cert and key if given.
func tlsClient(t *testing.T, addr string, ca *testcerts.CA, certPEM, keyPEM []byte) pb.RateLimitServiceClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "ratelimit.test"}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

var tlsRequest = &pb.RateLimitRequest{Domain: "api",
	Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}

// ask makes one call and returns the serial number of the certificate
// the server presented on it.
func ask(c pb.RateLimitServiceClient) (int64, error) {
	var p peer.Peer
	resp, err := c.ShouldRateLimit(context.Background(), tlsRequest, grpc.Peer(&p))
	if err != nil {
		return 0, err
	}
	if resp.OverallCode != pb.RateLimitResponse_OK {
		return 0, nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return -1, nil
	}
	return info.State.PeerCertificates[0].SerialNumber.Int64(), nil
}

// tlsServer starts floodgate-rls with gRPC over TLS, its files in a
// directory of their own, checked on every handshake; env adds to its
// settings, with the files' names as "cert", "key" and "ca" values.
func tlsServer(t *testing.T, dir string, env map[string]string) (addrs, *lockedBuffer) {
	t.Helper()
	old := tlsCheckEvery
	tlsCheckEvery = 0
	t.Cleanup(func() { tlsCheckEvery = old })
	root := runtimeDir(t, map[string]string{"api.yaml": "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"})
	full := map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": filepath.Join(dir, "tls.crt"), "GRPC_SERVER_TLS_KEY": filepath.Join(dir, "tls.key")}
	for k, v := range env {
		full[k] = strings.NewReplacer("ca", filepath.Join(dir, "ca.crt"), "other", filepath.Join(dir, "other.crt")).Replace(v)
		if k == "GRPC_CLIENT_TLS_SAN" {
			full[k] = v
		}
	}
	return start(t, full)
}

// TestTLS: gRPC over TLS with the server's certificate; clients verified
// by a CA, under either variable's name, and by a name; a plaintext
// client and a client of another CA refused.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "other")
	cert, key, sn := ca.Issue(t, "ratelimit.test")
	writeFile(t, filepath.Join(dir, "tls.crt"), cert)
	writeFile(t, filepath.Join(dir, "tls.key"), key)
	writeFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	writeFile(t, filepath.Join(dir, "other.crt"), other.PEM)
	clientCert, clientKey, _ := ca.Issue(t, "envoy.gateway.test")
	otherCert, otherKey, _ := other.Issue(t, "envoy.gateway.test")

	t.Run("server only", func(t *testing.T) {
		a, _ := tlsServer(t, dir, nil)
		if got, err := ask(tlsClient(t, a.grpc, ca, nil, nil)); err != nil || got != sn {
			t.Fatalf("a TLS call: certificate %d, %v; want %d", got, err, sn)
		}
		conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := ask(pb.NewRateLimitServiceClient(conn)); err == nil {
			t.Fatal("a plaintext call was answered")
		}
		if _, err := ask(tlsClient(t, a.grpc, other, nil, nil)); err == nil {
			t.Fatal("a client that trusts another CA took the server's certificate")
		}
	})
	for _, name := range []string{"GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_CACERT"} {
		t.Run("clients verified by "+name, func(t *testing.T) {
			a, _ := tlsServer(t, dir, map[string]string{name: "ca"})
			if _, err := ask(tlsClient(t, a.grpc, ca, nil, nil)); err == nil {
				t.Fatal("a client with no certificate was answered")
			}
			if _, err := ask(tlsClient(t, a.grpc, ca, otherCert, otherKey)); err == nil {
				t.Fatal("a client whose certificate another CA signed was answered")
			}
			if got, err := ask(tlsClient(t, a.grpc, ca, clientCert, clientKey)); err != nil || got != sn {
				t.Fatalf("a verified client: certificate %d, %v", got, err)
			}
		})
	}
	t.Run("both CAs", func(t *testing.T) {
		a, _ := tlsServer(t, dir, map[string]string{"GRPC_SERVER_TLS_CA_CERT": "ca", "GRPC_CLIENT_TLS_CACERT": "other"})
		for _, c := range [][2][]byte{{clientCert, clientKey}, {otherCert, otherKey}} {
			if _, err := ask(tlsClient(t, a.grpc, ca, c[0], c[1])); err != nil {
				t.Fatalf("a client of either CA: %v", err)
			}
		}
	})
	t.Run("client name", func(t *testing.T) {
		a, _ := tlsServer(t, dir, map[string]string{"GRPC_CLIENT_TLS_CACERT": "ca", "GRPC_CLIENT_TLS_SAN": "envoy.gateway.test"})
		if _, err := ask(tlsClient(t, a.grpc, ca, clientCert, clientKey)); err != nil {
			t.Fatalf("a client of the name: %v", err)
		}
		wrongCert, wrongKey, _ := ca.Issue(t, "someone.else.test")
		if _, err := ask(tlsClient(t, a.grpc, ca, wrongCert, wrongKey)); err == nil {
			t.Fatal("a client certificate of another name was answered")
		}
	})
}

// TestTLSRotation: certificate files replaced in place, as cert-manager
// and Envoy Gateway rotate them, are served on the next connection with
// no restart, while a connection made before keeps its calls; files that
// do not load together keep the ones before, and a later good pair is
// taken.
func TestTLSRotation(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	cert, key, first := ca.Issue(t, "ratelimit.test")
	crt, kf := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, crt, cert)
	writeFile(t, kf, key)
	writeFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	clientCert, clientKey, _ := ca.Issue(t, "envoy.gateway.test")
	a, logs := tlsServer(t, dir, map[string]string{"GRPC_SERVER_TLS_CA_CERT": "ca"})

	before := tlsClient(t, a.grpc, ca, clientCert, clientKey)
	if got, err := ask(before); err != nil || got != first {
		t.Fatalf("first certificate: %d, %v; want %d", got, err, first)
	}
	cert2, key2, second := ca.Issue(t, "ratelimit.test")
	writeFile(t, crt, cert2)
	writeFile(t, kf, key2)
	if got, err := ask(tlsClient(t, a.grpc, ca, clientCert, clientKey)); err != nil || got != second {
		t.Fatalf("a new connection after the rotation: certificate %d, %v; want %d", got, err, second)
	}
	if got, err := ask(before); err != nil || got != first {
		t.Fatalf("the connection made before the rotation: certificate %d, %v; want %d, its own", got, err, first)
	}

	// Half a rotation: a new certificate whose key is not there yet.
	cert3, key3, third := ca.Issue(t, "ratelimit.test")
	writeFile(t, crt, cert3)
	if got, err := ask(tlsClient(t, a.grpc, ca, clientCert, clientKey)); err != nil || got != second {
		t.Fatalf("with a certificate and a key that do not match: certificate %d, %v; want %d, the one before", got, err, second)
	}
	if !strings.Contains(logs.String(), "do not load") {
		t.Errorf("no word of the files that do not load:\n%s", logs)
	}
	writeFile(t, kf, key3)
	if got, err := ask(tlsClient(t, a.grpc, ca, clientCert, clientKey)); err != nil || got != third {
		t.Fatalf("once the key came: certificate %d, %v; want %d", got, err, third)
	}

	// A CA rotated in: clients of the new CA are verified.
	ca2 := testcerts.NewCA(t, "ca2")
	writeFile(t, filepath.Join(dir, "ca.crt"), append(append([]byte{}, ca.PEM...), ca2.PEM...))
	c2Cert, c2Key, _ := ca2.Issue(t, "envoy.gateway.test")
	if _, err := ask(tlsClient(t, a.grpc, ca, c2Cert, c2Key)); err != nil {
		t.Fatalf("a client of the CA rotated in: %v", err)
	}
}

// TestTLSSettings: TLS settings that cannot serve stop the start, with
// an error that names them; TLS files without GRPC_SERVER_USE_TLS are
// named in a warning.
func TestTLSSettings(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	cert, key, _ := ca.Issue(t, "ratelimit.test")
	writeFile(t, filepath.Join(dir, "tls.crt"), cert)
	writeFile(t, filepath.Join(dir, "tls.key"), key)
	writeFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	writeFile(t, filepath.Join(dir, "junk.crt"), []byte("not a certificate"))
	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"no files":       {map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_TLS_CERT"},
		"no key":         {map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "tls.crt"}, "GRPC_SERVER_TLS_KEY"},
		"name and no CA": {map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "tls.crt", "GRPC_SERVER_TLS_KEY": "tls.key", "GRPC_CLIENT_TLS_SAN": "x"}, "GRPC_CLIENT_TLS_SAN"},
	} {
		_, err := readSettings(func(k string) string { return c.env[k] })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.want)
		}
	}
	for name, c := range map[string]struct {
		files tlsFiles
		want  string
	}{
		"missing cert": {tlsFiles{cert: "none.crt", key: "tls.key"}, "none.crt"},
		"key as cert":  {tlsFiles{cert: "tls.key", key: "tls.key"}, "GRPC_SERVER_TLS_CERT"},
		"junk CA":      {tlsFiles{cert: "tls.crt", key: "tls.key", cas: []string{"junk.crt"}}, "no PEM certificate"},
		"missing CA":   {tlsFiles{cert: "tls.crt", key: "tls.key", cas: []string{"none.crt"}}, "none.crt"},
	} {
		f := c.files
		f.cert, f.key = filepath.Join(dir, f.cert), filepath.Join(dir, f.key)
		for i := range f.cas {
			f.cas[i] = filepath.Join(dir, f.cas[i])
		}
		if _, err := newServerTLS(f, 0, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.want)
		}
	}
	s, err := readSettings(func(k string) string {
		return map[string]string{"GRPC_SERVER_TLS_CERT": "x.crt", "GRPC_SERVER_TLS_CA_CERT": "ca.crt"}[k]
	})
	if err != nil || s.grpcTLS != nil {
		t.Fatalf("TLS files without GRPC_SERVER_USE_TLS: %v, TLS %v", err, s.grpcTLS)
	}
	if w := strings.Join(s.warnings, "\n"); !strings.Contains(w, "GRPC_SERVER_TLS_CERT") || !strings.Contains(w, "GRPC_SERVER_TLS_CA_CERT") {
		t.Errorf("warnings: %q", s.warnings)
	}
	// A start with files that do not load fails, naming them.
	root := runtimeDir(t, map[string]string{"api.yaml": "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"})
	env := map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "GRPC_SERVER_USE_TLS": "true", "HOST": "127.0.0.1", "PORT": "0",
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"GRPC_SERVER_TLS_CERT": filepath.Join(dir, "tls.crt"), "GRPC_SERVER_TLS_KEY": filepath.Join(dir, "none.key")}
	if err := run(context.Background(), func(k string) string { return env[k] }, &lockedBuffer{}, nil); err == nil || !strings.Contains(err.Error(), "none.key") {
		t.Errorf("a start with a key that is not there: %v", err)
	}
}
