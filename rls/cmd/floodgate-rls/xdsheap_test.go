package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// childADS names the environment variable that makes this test binary
// TestHeapBoundXDSPushes's ADS server: its value is the folder of
// newEGXDS's files.
const childADS = "FLOODGATE_TEST_ADS"

// adsEvent is what the child ADS server saw: a push set ("set", with
// its bytes), sent ("sent"), ACKed ("ack") or NACKed ("nack", with the
// message), at a time of the machine's clock.
type adsEvent struct {
	kind, version, msg string
	bytes              int
	at                 time.Time
}

// remoteADS is go-control-plane's ADS server and snapshot cache in a
// process of its own, as Envoy Gateway's controller is a pod of its
// own: a push of a million rules, built and marshaled there, takes none
// of the heap that the test weighs.
type remoteADS struct {
	addr   string
	in     io.Writer
	events chan adsEvent
}

func startRemoteADS(t *testing.T, dir string) *remoteADS {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childADS+"="+dir)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &remoteADS{in: in, events: make(chan adsEvent, 1024)}
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatal("the ADS server did not start")
	}
	r.addr = sc.Text()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sc.Scan() {
			var e adsEvent
			var at int64
			f := strings.SplitN(sc.Text(), " ", 5)
			e.kind, e.version = f[0], f[1]
			at, _ = strconv.ParseInt(f[2], 10, 64)
			e.at = time.Unix(0, at)
			e.bytes, _ = strconv.Atoi(f[3])
			if len(f) == 5 {
				e.msg, _ = strconv.Unquote(f[4])
			}
			r.events <- e
		}
		close(r.events)
	}()
	t.Cleanup(func() {
		in.Close() // the child ends at its input's end
		cmd.Wait()
		<-done
	})
	return r
}

// push sets node's snapshot to version v, of the shape's n rules, and
// returns the answer it got: the times it was set, sent and answered,
// and the answer (the NACK's message; "" for an ACK). A NACK of a push
// too large to read names no version: it is taken as the answer too.
func (r *remoteADS) push(t *testing.T, node, v, shape string, n int) (set, sent, answered adsEvent) {
	t.Helper()
	fmt.Fprintf(r.in, "%s %s %s %d\n", node, v, shape, n)
	deadline := time.After(5 * time.Minute)
	for {
		var e adsEvent
		select {
		case e = <-r.events:
		case <-deadline:
			t.Fatalf("the push %s: no answer", v)
		}
		switch {
		case e.version != v && !(e.kind == "nack" && e.version == "?"):
		case e.kind == "set":
			set = e
		case e.kind == "sent" && sent.kind == "":
			sent = e
		case e.kind == "ack" || e.kind == "nack":
			return set, sent, e
		}
	}
}

// serveRemoteADS is the child's: the ADS server over TLS 1.3, a client
// certificate of the CA required, on a loopback port that it writes on
// its output; each line "node version shape n" of its input sets node's
// snapshot (shapes: eg, n of Envoy Gateway's rules; flat, n of one
// level; bytes, Envoy Gateway's rules of n bytes in all), and each push
// set, sent, ACKed and NACKed is written as an adsEvent's line.
func serveRemoteADS(dir string) error {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "ads.crt"), filepath.Join(dir, "ads.key"))
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	var mu sync.Mutex
	versions := map[string]string{} // by nonce
	say := func(kind, version string, bytes int, msg string) {
		mu.Lock()
		defer mu.Unlock()
		line := fmt.Sprintf("%s %s %d %d", kind, version, time.Now().UnixNano(), bytes)
		if msg != "" {
			line += " " + strconv.Quote(msg)
		}
		fmt.Println(line)
	}
	cb := serverv3.CallbackFuncs{
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			mu.Lock()
			versions[resp.Nonce] = resp.VersionInfo
			mu.Unlock()
			say("sent", resp.VersionInfo, 0, "")
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			mu.Lock()
			v, ok := versions[req.ResponseNonce]
			mu.Unlock()
			switch {
			case req.ErrorDetail != nil && !ok:
				say("nack", "?", 0, req.ErrorDetail.Message) // a push too large to read
			case req.ErrorDetail != nil:
				say("nack", v, 0, req.ErrorDetail.Message)
			case ok && req.VersionInfo == v:
				say("ack", v, 0, "")
			}
			return nil
		},
	}
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(context.Background(), cache, cb))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go gs.Serve(ln)
	defer gs.Stop()
	fmt.Println(ln.Addr())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var node, v, shape string
		var n int
		if _, err := fmt.Sscan(sc.Text(), &node, &v, &shape, &n); err != nil {
			return fmt.Errorf("%q: %v", sc.Text(), err)
		}
		var rc *rlsconf.RateLimitConfig
		switch shape {
		case "eg":
			rc = egRules(n, 0)
		case "bytes": // Envoy Gateway's rules, some 166 bytes each
			rc = egRules(n/166, 0)
		case "flat":
			rc = &rlsconf.RateLimitConfig{Name: "api", Domain: "api"}
			for i := range n {
				rc.Descriptors = append(rc.Descriptors, &rlsconf.RateLimitDescriptor{Key: "k", Value: strconv.Itoa(i),
					RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}})
			}
		default:
			return fmt.Errorf("shape %q", shape)
		}
		snap, err := cachev3.NewSnapshot(v, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: {rc}})
		if err != nil {
			return err
		}
		if err := cache.SetSnapshot(context.Background(), node, snap); err != nil {
			return err
		}
		say("set", v, proto.Size(rc), "")
	}
	return sc.Err()
}

// gc collects twice: sync.Pool's objects (gRPC's buffers) outlive one
// collection.
func gc() {
	runtime.GC()
	runtime.GC()
}

// heapObjects reads the bytes of the heap's objects, live or not yet
// swept, with no stop of the world.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestHeapBoundXDSPushes: floodgate-rls as Envoy Gateway runs it, its
// configuration pushed over TLS 1.3 by go-control-plane's ADS server (a
// process of its own), answers every push within Envoy Gateway's
// deadlines, serving the configuration before while it loads, and
// holds what it loads to twice what it keeps:
//
//   - 100,000 rules as Envoy Gateway writes them (17 MB), within the
//     default bounds: ACKed within 10 s; all the process allocated from
//     the push's arrival to its answer (the push's bytes as gRPC reads
//     them included) is at most twice what the configuration keeps;
//   - a million rules of one level (19 MB): NACKed within 5 s, naming
//     FLOODGATE_CONFIG_MAX_MEMORY;
//   - a push of 100 MB: NACKed within 10 s;
//   - a million rules on a replica whose FLOODGATE_CONFIG_MAX_MEMORY is
//     raised to 1 GiB: answered within 10 s, ACKed (within twice what it
//     keeps, as above) or NACKed naming FLOODGATE_CONFIG_LOAD_TIMEOUT.
//
// While each loads, a request made from within the load (testPace) is
// answered by the configuration before. The times are from the push
// leaving the ADS server to its answer reaching it. It does not run
// under the race detector, whose own allocations make a heap figure
// meaningless and whose slowness makes the deadlines; make test-heap
// runs it without.
func TestHeapBoundXDSPushes(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	if testing.Short() {
		t.Skip("-short: the pushes of a million rules run in the full tests")
	}
	eg := newEGXDS(t)
	ads := startRemoteADS(t, eg.dir)

	// From within each load, every 4,096th time it paces itself, a
	// request: it must be answered by the configuration before.
	var client atomic.Pointer[pb.RateLimitServiceClient]
	var paces, during, wrong atomic.Int64
	testPace = func() {
		if paces.Add(1)%4096 != 0 {
			return
		}
		if c := client.Load(); c != nil {
			if limit, err := routeLimit(*c); err != nil || limit != 10 {
				wrong.Add(1)
			}
			during.Add(1)
		}
	}
	t.Cleanup(func() { testPace = nil })

	replica := func(node string, extra map[string]string) func() error {
		env := eg.with(ads.addr, extra)
		env["CONFIG_GRPC_XDS_NODE_ID"] = node
		a, _, stop := serve(t, env)
		// The configuration before: route 0's rule, 10 a minute.
		if _, _, e := ads.push(t, node, "old", "eg", 1); e.kind != "ack" {
			t.Fatalf("%s: the first push: %+v", node, e)
		}
		c := grpcClient(t, a.grpc)
		if limit, err := routeLimit(c); err != nil || limit != 10 {
			t.Fatalf("%s: the first push's rule: %v, limit %d", node, err, limit)
		}
		client.Store(&c)
		return stop
	}
	type tc struct {
		node, version, shape string
		n                    int
		within               time.Duration
		want                 string // "" for an ACK; what the NACK says
	}
	run := func(c tc) {
		t.Helper()
		gc() // gRPC's pools too
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		base := heapObjects()
		during.Store(0)
		var peak atomic.Uint64
		stopSampling := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				peak.Store(max(peak.Load(), heapObjects()))
				select {
				case <-stopSampling:
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
		}()
		set, sent, answer := ads.push(t, c.node, c.version, c.shape, c.n)
		close(stopSampling)
		<-sampled
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		if answer.kind == "nack" {
			// The server sends a refused push again until it has another:
			// what the refused one left is weighed once another is in
			// force.
			ads.push(t, c.node, c.version+"-after", "eg", 1)
		}
		gc()
		runtime.ReadMemStats(&after)
		kept := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		took := answer.at.Sub(sent.at)
		t.Logf("%s: %d bytes, %s %v after it was sent (%v after it was set)%s; allocated %d MB, kept %d MB; the heap's objects (live or not yet swept) at most %d MB above the %d MB before; %d requests from within the load answered",
			c.version, set.bytes, answer.kind, took.Round(time.Millisecond), answer.at.Sub(set.at).Round(time.Millisecond),
			map[bool]string{true: " (" + answer.msg + ")"}[answer.msg != ""], allocated>>20, kept>>20, (peak.Load()-base)>>20, base>>20, during.Load())
		if took > c.within {
			t.Errorf("%s: answered %v after it was sent, want within %v", c.version, took, c.within)
		}
		switch {
		case c.want == "" && answer.kind == "ack":
			if allocated > 2*uint64(kept) {
				t.Errorf("%s: allocated %d bytes from its arrival to its ACK, more than twice the %d it keeps", c.version, allocated, kept)
			}
		case c.want == "" && !strings.Contains(answer.msg, "FLOODGATE_CONFIG_LOAD_TIMEOUT"),
			c.want != "" && (answer.kind != "nack" || !strings.Contains(answer.msg, c.want)):
			t.Errorf("%s: %s %q; want %s", c.version, answer.kind, answer.msg, map[bool]string{true: "an ACK", false: "a NACK saying " + c.want}[c.want == ""])
		}
		if answer.kind == "nack" && kept > 1<<20 {
			t.Errorf("%s: refused, and %d bytes still held", c.version, kept)
		}
		if wrong.Load() != 0 {
			t.Errorf("%s: %d requests from within the load not answered by the configuration before", c.version, wrong.Load())
		}
	}

	stop := replica("defaults", nil)
	run(tc{"defaults", "eg-100k", "eg", 100_000, 10 * time.Second, ""})
	ads.push(t, "defaults", "back", "eg", 1)
	if during.Load() == 0 {
		t.Error("no request was made from within the load of 100,000 rules")
	}
	run(tc{"defaults", "flat-1m", "flat", 1_000_000, 5 * time.Second, "FLOODGATE_CONFIG_MAX_MEMORY"})
	run(tc{"defaults", "100mb", "bytes", 100 << 20, 10 * time.Second, "FLOODGATE_CONFIG_MAX_MEMORY"})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stop = replica("raised", map[string]string{"FLOODGATE_CONFIG_MAX_MEMORY": strconv.Itoa(1 << 30)})
	run(tc{"raised", "raised-flat-1m", "flat", 1_000_000, 10 * time.Second, ""})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// routeLimit asks for route 0's rule of egRules, and returns its limit.
func routeLimit(c pb.RateLimitServiceClient) (uint32, error) {
	route := "httproute/default/backend-0/rule/0/match/0/www_example_com"
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: egDomain, Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: route, Value: route}, {Key: egRule, Value: egRule}}}}})
	if err != nil {
		return 0, err
	}
	return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(), nil
}
