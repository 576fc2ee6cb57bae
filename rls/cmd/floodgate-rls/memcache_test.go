package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a DNS server on loopback UDP that answers SRV queries
// for one name with the servers the test sets, and NXDOMAIN for the
// rest, or for that name too while it has none.
type dnsServer struct {
	addr string
	name string // the SRV name, with its final dot

	mu      sync.Mutex
	servers []string // host:port
	queries int
}

// startDNS starts the server, and makes MEMCACHE_SRV resolve through
// it until the test ends.
func startDNS(t *testing.T, name string) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{addr: pc.LocalAddr().String(), name: name + "."}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if msg, err := d.answer(buf[:n]); err == nil {
				pc.WriteTo(msg, from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	before := memcacheResolver
	memcacheResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.addr)
	}}
	t.Cleanup(func() { memcacheResolver = before })
	return d
}

// set makes the server answer the SRV name with servers (none:
// NXDOMAIN).
func (d *dnsServer) set(servers ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.servers = servers
}

// answered is how many queries for the SRV name the server answered.
func (d *dnsServer) answered() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queries
}

// answer builds the response to the query in msg.
func (d *dnsServer) answer(msg []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	servers := d.servers
	ours := strings.EqualFold(q.Name.String(), d.name)
	if ours {
		d.queries++
	}
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !ours || len(servers) == 0 {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if ours && q.Type == dnsmessage.TypeSRV {
		for _, s := range servers {
			host, port, _ := net.SplitHostPort(s)
			n, _ := strconv.Atoi(port)
			target, err := dnsmessage.NewName(host + ".") // a name: Go refuses an address as an SRV target
			if err != nil {
				return nil, err
			}
			if err := b.SRVResource(dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeSRV, Class: dnsmessage.ClassINET},
				dnsmessage.SRVResource{Port: uint16(n), Target: target}); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}

// localhost is addr, 127.0.0.1:port, as localhost:port.
func localhost(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return "localhost:" + port
}

// memcacheStats returns memcached's "stats" at addr, by name.
func memcacheStats(t testing.TB, addr string) map[string]int64 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("stats\r\n")); err != nil {
		t.Fatal(err)
	}
	stats := map[string]int64{}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "END" {
			return stats
		}
		if len(f) == 3 && f[0] == "STAT" {
			if n, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				stats[f[1]] = n
			}
		}
	}
	t.Fatalf("memcached's stats at %s ended early: %v", addr, sc.Err())
	return nil
}

// TestMemcacheSRV: BACKEND_TYPE=memcache with MEMCACHE_SRV, resolved by
// a DNS server on loopback: the limits are kept on the server it names;
// with MEMCACHE_SRV_REFRESH, a new answer moves them to the new server
// (whose counts start afresh: memcached's servers share nothing), and a
// failed lookup keeps the server before. A name that does not resolve
// at start stops the start, naming MEMCACHE_SRV.
func TestMemcacheSRV(t *testing.T) {
	const name = "_memcache._tcp.cache.test"
	a, b := memcachetest.Start(t), memcachetest.Start(t)
	dns := startDNS(t, name)
	root := runtimeDir(t, map[string]string{"api.yaml": apiConfig(5)})
	env := map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "BACKEND_TYPE": "memcache", "MEMCACHE_SRV": name,
		"FLOODGATE_FAILURE_MODE": "closed"}

	err := run(context.Background(), func(k string) string { return env[k] }, &lockedBuffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "MEMCACHE_SRV") {
		t.Fatalf("run with MEMCACHE_SRV unresolved: %v, want an error naming it", err)
	}

	dns.set(localhost(a.Addr()))
	env["MEMCACHE_SRV_REFRESH"] = "20ms"
	srv, logs := start(t, env)
	c := grpcClient(t, srv.grpc)
	for i, want := range []uint32{4, 3} {
		if code, left := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK || left != want {
			t.Fatalf("call %d on %s: %v, %d left; want OK, %d", i, a.Addr(), code, left, want)
		}
	}
	if na, nb := memcacheStats(t, a.Addr())["curr_items"], memcacheStats(t, b.Addr())["curr_items"]; na == 0 || nb != 0 {
		t.Fatalf("with the SRV name on %s: %d items there, %d on the other", a.Addr(), na, nb)
	}

	dns.set(localhost(b.Addr()))
	waitFor(t, "the refresh to the new server", func() bool { return strings.Contains(logs.String(), "memcached's servers changed") })
	if code, left := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK || left != 4 {
		t.Fatalf("on the new server %s: %v, %d left; want OK, 4 (a count of its own)", b.Addr(), code, left)
	}
	if nb := memcacheStats(t, b.Addr())["curr_items"]; nb == 0 {
		t.Fatalf("after the refresh: nothing on %s", b.Addr())
	}

	dns.set()
	seen := dns.answered()
	waitFor(t, "a failed refresh", func() bool {
		return dns.answered() > seen+1 && strings.Contains(logs.String(), "refreshing memcached's servers: the list before stays")
	})
	if code, left := xdsCall(t, c, "v"); code != pb.RateLimitResponse_OK || left != 3 {
		t.Fatalf("after a failed refresh: %v, %d left; want OK, 3 (the server before kept)", code, left)
	}
}

// TestMemcacheHostPort: BACKEND_TYPE=memcache with MEMCACHE_HOST_PORT:
// two floodgate-rls on one memcached share a descriptor's limit, and
// both stop cleanly. A host that does not resolve stops the start.
func TestMemcacheHostPort(t *testing.T) {
	mc := memcachetest.Start(t)
	root := runtimeDir(t, map[string]string{"api.yaml": apiConfig(5)})
	env := map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": mc.Addr(),
		"CACHE_KEY_PREFIX": fmt.Sprint("hostport-", time.Now().UnixNano())}
	one, _ := start(t, env)
	two, _ := start(t, env)
	c1, c2 := grpcClient(t, one.grpc), grpcClient(t, two.grpc)
	passed := 0
	for i := range 8 {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		if code, _ := xdsCall(t, c, "shared"); code == pb.RateLimitResponse_OK {
			passed++
		}
	}
	if passed != 5 {
		t.Fatalf("two replicas on one memcached passed %d of 8, want the limit, 5", passed)
	}

	env["MEMCACHE_HOST_PORT"] = "no-such-host.invalid:11211"
	if err := run(context.Background(), func(k string) string { return env[k] }, &lockedBuffer{}, nil); err == nil || !strings.Contains(err.Error(), "no-such-host.invalid") {
		t.Fatalf("run with a host that does not resolve: %v", err)
	}
}

// TestMemcacheAlgorithms: every algorithm, named by a rule's algorithm,
// on memcached through two floodgate-rls: each descriptor's limit of 5
// an hour passes exactly 5 of 8 requests spread over both.
func TestMemcacheAlgorithms(t *testing.T) {
	mc := memcachetest.Start(t)
	algs := []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_counter", "sliding_log"}
	yaml := "domain: api\ndescriptors:\n"
	for _, alg := range algs {
		yaml += fmt.Sprintf("  - key: k\n    value: %s\n    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: %s}\n", alg, alg)
	}
	root := runtimeDir(t, map[string]string{"api.yaml": yaml})
	env := map[string]string{"RUNTIME_ROOT": filepath.Join(root, "current"), "BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": mc.Addr(),
		"CACHE_KEY_PREFIX": fmt.Sprint("algorithms-", time.Now().UnixNano())}
	one, _ := start(t, env)
	two, _ := start(t, env)
	c1, c2 := grpcClient(t, one.grpc), grpcClient(t, two.grpc)
	for _, alg := range algs {
		passed := 0
		for i := range 8 {
			c := c1
			if i%2 == 1 {
				c = c2
			}
			if code, _ := xdsCall(t, c, alg); code == pb.RateLimitResponse_OK {
				passed++
			}
		}
		if passed != 5 {
			t.Errorf("%s: two replicas on one memcached passed %d of 8, want the limit, 5", alg, passed)
		}
	}
}
