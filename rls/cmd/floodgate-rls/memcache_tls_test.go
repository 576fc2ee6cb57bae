package main

import (
	"bufio"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
	"github.com/floodgate-go/floodgate/internal/testcerts"
	"github.com/floodgate-go/floodgate/rls/internal/peertest"
)

// startTLSMemcached runs a memcached that serves TLS only (-Z), with
// the certificate and key at cert and key, on a free loopback port,
// until the test ends, and returns its port once it answers over TLS.
func startTLSMemcached(t *testing.T, cert, key string) string {
	t.Helper()
	bin, err := memcachetest.Find()
	if err != nil {
		if os.Getenv(memcachetest.Require) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	_, port, _ := net.SplitHostPort(freeAddr(t))
	args := []string{"-l", "127.0.0.1", "-p", port, "-U", "0", "-m", "64", "-Z", "-o", "ssl_chain_cert=" + cert + ",ssl_key=" + key}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	addr := net.JoinHostPort("127.0.0.1", port)
	waitFor(t, "memcached over TLS", func() bool {
		select {
		case <-done:
			t.Fatalf("memcached -Z exited: %s", out.String())
		default:
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("version\r\n")); err != nil {
			return false
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		return err == nil && strings.HasPrefix(line, "VERSION ")
	})
	return port
}

// TestMemcacheTLS: MEMCACHE_TLS=true reaches a memcached that serves TLS
// only, verifying its certificate to MEMCACHE_TLS_CACERT and its name;
// MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION skips the name alone, as
// envoyproxy/ratelimit's does: a certificate that no CA given signed is
// refused still, and the call fails (FLOODGATE_FAILURE_MODE=error).
func TestMemcacheTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "memcached-ca")
	cert, key, _ := ca.Issue(t, "memcached.test") // and 127.0.0.1
	writeFile(t, filepath.Join(dir, "tls.crt"), cert)
	writeFile(t, filepath.Join(dir, "tls.key"), key)
	writeFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	other := testcerts.NewCA(t, "another-ca")
	writeFile(t, filepath.Join(dir, "other.crt"), other.PEM)
	port := startTLSMemcached(t, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))

	for i, tc := range []struct {
		host, ca, skip string
		works          bool
	}{
		{"127.0.0.1", "ca.crt", "", true},
		{"localhost", "ca.crt", "", false}, // the certificate names 127.0.0.1 and memcached.test, not localhost, which is dialed as 127.0.0.1
		{"localhost", "ca.crt", "true", true},
		{"127.0.0.1", "other.crt", "", false},
		{"127.0.0.1", "other.crt", "true", false}, // the chain is verified still
		{"127.0.0.1", "", "true", false},          // to the system's roots, which lack the test's CA
	} {
		root := runtimeDir(t, map[string]string{"api.yaml": apiConfig(5)})
		env := map[string]string{"RUNTIME_ROOT": root + "/current", "BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": net.JoinHostPort(tc.host, port),
			"MEMCACHE_TLS": "true", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": tc.skip, "FLOODGATE_FAILURE_MODE": "error",
			"CACHE_KEY_PREFIX": "tls" + strconv.Itoa(i), "FLOODGATE_MEMCACHE_TIMEOUT": "2s"}
		if tc.ca != "" {
			env["MEMCACHE_TLS_CACERT"] = filepath.Join(dir, tc.ca)
		}
		a, _, stop := serve(t, env)
		c := grpcClient(t, a.grpc)
		passed, failed := 0, 0
		for range 7 {
			switch o := call(c, peertest.Request("api", 0, "k=v"), 10*time.Second); o.code {
			case pb.RateLimitResponse_OK.String():
				passed++
			case pb.RateLimitResponse_OVER_LIMIT.String():
			case "Unknown":
				failed++
			default:
				t.Errorf("case %d: %v", i, o)
			}
		}
		if tc.works && (passed != 5 || failed != 0) || !tc.works && failed != 7 {
			t.Errorf("case %d (%s, CA %q, skip hostname verification %q): %d passed and %d failed of 7; want the limit, 5, over TLS: %v",
				i, tc.host, tc.ca, tc.skip, passed, failed, tc.works)
		}
		if err := stop(); err != nil {
			t.Errorf("case %d: run: %v", i, err)
		}
	}
}
