package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testcerts"
	"github.com/loov/hrtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// The Envoy Gateway benchmarks run both rate-limit services as Envoy
// Gateway deploys envoyproxy/ratelimit: on a redis-server, configured
// over xDS by go-control-plane's ADS server and snapshot cache over
// TLS 1.3 with client certificates, serving gRPC over TLS.

// egRules is how many rules a push of BenchmarkXDS holds.
const egRules = 10_000

// egDomain is the domain of the pushed rules, Envoy Gateway's name for a
// listener's.
const egDomain = "default/eg/http"

// egRoute is route i's descriptor key and value, as Envoy Gateway's
// translator names a route rule's match.
func egRoute(i int) string {
	return "httproute/default/backend-" + strconv.Itoa(i) + "/rule/0/match/0/www_example_com"
}

// egPush is the configuration pushed at version v: egRules routes, each
// with its rule below it (a limit of a minute no request reaches, and
// that changes with v, so that every push changes every rule), and the
// probe domain, whose one limit says which version is in force.
func egPush(v int) []types.Resource {
	gw := &rlsconf.RateLimitConfig{Name: egDomain, Domain: egDomain}
	for i := range egRules {
		r := egRoute(i)
		gw.Descriptors = append(gw.Descriptors, &rlsconf.RateLimitDescriptor{Key: r, Value: r,
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "rule-0-match-0", Value: "rule-0-match-0",
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: uint32(1_000_000 + i + v)}}}})
	}
	probe := &rlsconf.RateLimitConfig{Name: "probe", Domain: "probe", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "version", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: uint32(1_000_000 + v)}}}}
	return []types.Resource{gw, probe}
}

// egRequest asks for route i's rule, as Envoy does under Envoy Gateway.
func egRequest(i int) *pb.RateLimitRequest {
	r := egRoute(i)
	return &pb.RateLimitRequest{Domain: egDomain, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: r, Value: r}, {Key: "rule-0-match-0", Value: "rule-0-match-0"}}}}}
}

var versionProbe = &pb.RateLimitRequest{Domain: "probe", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "version", Value: "x"}}}}}

// inForce is the version a service has in force, -1 for none.
func inForce(c pb.RateLimitServiceClient) int {
	resp, err := c.ShouldRateLimit(context.Background(), versionProbe)
	if err != nil || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit == nil {
		return -1
	}
	return int(resp.Statuses[0].CurrentLimit.RequestsPerUnit) - 1_000_000
}

// egTLS is an Envoy Gateway deployment's certificates: a CA, and the
// files of the envoy-rate-limit secret.
type egTLS struct {
	ca    *testcerts.CA
	dir   string // tls.crt, tls.key, ca.crt: the service's, for gRPC and xDS both
	proxy credentials.TransportCredentials
}

func newEGTLS(b *testing.B) *egTLS {
	ca := testcerts.NewCA(b, "envoy-gateway")
	e := &egTLS{ca: ca, dir: b.TempDir()}
	cert, key, _ := ca.Issue(b, "envoy-ratelimit.envoy-gateway-system.svc.cluster.local")
	for name, data := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.PEM} {
		if err := os.WriteFile(filepath.Join(e.dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	pc, pk, _ := ca.Issue(b, "envoy")
	pair, err := tls.X509KeyPair(pc, pk)
	if err != nil {
		b.Fatal(err)
	}
	e.proxy = credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), ServerName: "envoy-ratelimit.envoy-gateway-system.svc.cluster.local",
		Certificates: []tls.Certificate{pair}})
	return e
}

// serverEnv is the service's gRPC over TLS, clients verified by the CA:
// Envoy Gateway's settings, and envoyproxy/ratelimit's name for the
// client CA, which it reads in place of Envoy Gateway's.
func (e *egTLS) serverEnv() []string {
	return []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + filepath.Join(e.dir, "tls.crt"),
		"GRPC_SERVER_TLS_KEY=" + filepath.Join(e.dir, "tls.key"), "GRPC_SERVER_TLS_CA_CERT=" + filepath.Join(e.dir, "ca.crt"),
		"GRPC_CLIENT_TLS_CACERT=" + filepath.Join(e.dir, "ca.crt")}
}

// adsServer is go-control-plane's ADS server on a snapshot cache, as
// Envoy Gateway's controller runs it, over TLS 1.3 that requires a
// client certificate of the CA: a process of its own (this test binary,
// run again with adsChild set), as the controller is a pod of its own,
// so that its work (it marshals each push) is scheduled apart from the
// callers that measure the services. push sends it a node and a version
// of egPush to set.
type adsServer struct {
	addr string
	mu   sync.Mutex
	in   io.Writer
	out  *bufio.Reader
}

// adsChild names the environment variable that makes this binary the
// ADS server: its value is the folder of its certificate (ads.crt,
// ads.key) and of the CA (ca.crt).
const adsChild = "FLOODGATE_BENCH_ADS"

func startADS(b *testing.B, e *egTLS) *adsServer {
	cert, key, _ := e.ca.Issue(b, "envoy-gateway")
	for name, data := range map[string][]byte{"ads.crt": cert, "ads.key": key} {
		if err := os.WriteFile(filepath.Join(e.dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), adsChild+"="+e.dir)
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close() // the child ends at its input's end
		if err := cmd.Wait(); err != nil {
			b.Errorf("the ADS server: %v", err)
		}
	})
	a := &adsServer{in: in, out: bufio.NewReader(out)}
	line, err := a.out.ReadString('\n')
	if err != nil {
		b.Fatalf("the ADS server did not start: %v", err)
	}
	a.addr = strings.TrimSpace(line)
	return a
}

// push sets node's snapshot to version v of egPush, and returns once the
// ADS server has.
func (a *adsServer) push(b *testing.B, node string, v int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := fmt.Fprintf(a.in, "%s %d\n", node, v); err != nil {
		b.Fatal(err)
	}
	if line, err := a.out.ReadString('\n'); err != nil || line != "ok\n" {
		b.Fatalf("the ADS server's answer to a push: %q, %v", line, err)
	}
}

// serveADS is the ADS server's process: it serves on a loopback port,
// which it writes on its output, and sets a snapshot for each line "node
// version" of its input, answering "ok", until its input ends.
func serveADS(dir string) error {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "ads.crt"), filepath.Join(dir, "ads.key"))
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no CA in %s", dir)
	}
	for v := range versionSpan {
		egPushCached(v) // built before any push: only the push is timed
	}
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(context.Background(), cache, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go gs.Serve(ln)
	defer gs.Stop()
	fmt.Println(ln.Addr())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		node, vs, _ := strings.Cut(sc.Text(), " ")
		v, err := strconv.Atoi(vs)
		if err != nil {
			return fmt.Errorf("a push of %q", sc.Text())
		}
		snap, err := cachev3.NewSnapshot(vs, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: egPushCached(v)})
		if err != nil {
			return err
		}
		if err := cache.SetSnapshot(context.Background(), node, snap); err != nil {
			return err
		}
		fmt.Println("ok")
	}
	return sc.Err()
}

// xdsService is a service configured by the ADS server, as its node.
type xdsService struct {
	rlsServer
	node string
}

// startEG starts both services as Envoy Gateway deploys them, on redis
// at redisAddr, configured by ads with version 0 of egPush.
func startEG(b *testing.B, redisAddr string, e *egTLS, ads *adsServer) []xdsService {
	dir := b.TempDir()
	peer, ours := serviceBinaries(b)
	env := append([]string{"RUNTIME_ROOT=" + filepath.Join(dir, "data"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true",
		"RUNTIME_WATCH_ROOT=false", "LOG_LEVEL=warn", "USE_STATSD=false", "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + ads.addr,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + filepath.Join(e.dir, "tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + filepath.Join(e.dir, "tls.key"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + filepath.Join(e.dir, "ca.crt"),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1"}, e.serverEnv()...)
	var out []xdsService
	for _, s := range []struct{ name, bin, prefix string }{{"envoy-ratelimit", peer, "eg-peer"}, {"floodgate-rls", ours, "eg-fg"}} {
		node := "envoy-ratelimit-" + s.name
		ads.push(b, node, 0)
		svc := startService(b, s.name, s.bin, append(env, "CONFIG_GRPC_XDS_NODE_ID="+node, "CACHE_KEY_PREFIX="+s.prefix), e.proxy, versionProbe)
		out = append(out, xdsService{rlsServer: svc, node: node})
	}
	return out
}

// BenchmarkXDS measures configuration pushes as Envoy Gateway sends them,
// to both services deployed as it deploys them (see startEG), each with
// a node id of its own:
//
//   - scenario=push-10000: a push of a configuration of 10,000 rules
//     (Envoy Gateway's shape: a route's descriptor, its rule below it),
//     every rule changed, from the ADS server's new snapshot to the
//     moment the service answers by it. ns/op is that time.
//   - scenario=load-pushes-1s: ShouldRateLimit's latency (an open loop
//     of 2,000 requests a second, each for a random route of the 10,000;
//     see paced) in seconds that start with such a push (p99-pushes-ns)
//     and in quiet seconds (p99-quiet-ns), eight of each interleaved, with
//     half a second that counts in neither after each pushed one, so
//     that a push's aftermath never falls in a quiet second; p99-ratio
//     is the first ÷ the second.
//
// Without redis-server or the module proxy it runs nothing, and says so,
// unless FLOODGATE_REQUIRE_REDIS=1.
func BenchmarkXDS(b *testing.B) {
	if _, err := redistest.Find(); err != nil && os.Getenv(redistest.Require) != "1" {
		b.Logf("no Envoy Gateway scenarios: %v", err)
		return
	}
	srv := redistest.Start(b)
	e := newEGTLS(b)
	ads := startADS(b, e)
	services := startEG(b, srv.Addr, e, ads)
	version := 0
	for _, s := range services {
		b.Run("scenario=push-"+strconv.Itoa(egRules)+"/impl="+s.name, func(b *testing.B) {
			for range b.N {
				version++
				ads.push(b, s.node, version)
				for inForce(s.client) != version%versionSpan {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	for _, s := range services {
		b.Run("scenario=load-pushes-1s/impl="+s.name, func(b *testing.B) {
			var quiet, pushed []time.Duration
			for range b.N {
				// Seconds with a push at their start and quiet seconds,
				// interleaved, so that the machine's own swings fall on
				// both alike; half a second that counts in neither after
				// each push, so that its aftermath never falls in a quiet
				// second.
				for range 8 {
					pushed = append(pushed, paced(s.client, 2000, time.Second, func() {
						version++
						ads.push(b, s.node, version)
					})...)
					paced(s.client, 2000, 500*time.Millisecond, nil)
					quiet = append(quiet, paced(s.client, 2000, time.Second, nil)...)
				}
			}
			q := hrtime.NewDurationHistogram(quiet, &hrtime.HistogramOptions{BinCount: 1})
			p := hrtime.NewDurationHistogram(pushed, &hrtime.HistogramOptions{BinCount: 1})
			b.ReportMetric(q.P99, "p99-quiet-ns")
			b.ReportMetric(p.P99, "p99-pushes-ns")
			b.ReportMetric(p.P99/q.P99, "p99-ratio")
			b.ReportMetric(float64(len(quiet)+len(pushed))/float64(b.N), "requests/op")
		})
	}
}

// versionSpan bounds the versions the probe reads: egPush's content is
// that of version v mod versionSpan, built once each.
const versionSpan = 4

var egPushes [versionSpan]struct {
	once sync.Once
	rs   []types.Resource
}

// egPushCached is egPush(v mod versionSpan), built once.
func egPushCached(v int) []types.Resource {
	e := &egPushes[v%versionSpan]
	e.once.Do(func() { e.rs = egPush(v % versionSpan) })
	return e.rs
}

// paced sends ShouldRateLimit to c at rate requests a second for d, an
// open loop: each request is sent when it is due (or, where the timer
// woke late, at once), whatever the ones before it are doing, and its
// latency runs from when it was sent: the timer's lateness, which is
// this process's and not the service's, is left out. every
// is called (in a goroutine of its own) at the start and once a second
// after. It returns every request's latency.
func paced(c pb.RateLimitServiceClient, rate int, d time.Duration, every func()) []time.Duration {
	interval := time.Second / time.Duration(rate)
	n := int(d / interval)
	lat := make([]time.Duration, n)
	var failed atomic.Int64
	var wg sync.WaitGroup
	r := rand.New(rand.NewPCG(rand.Uint64(), 2))
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if every != nil && i%rate == 0 {
			wg.Add(1)
			go func() { defer wg.Done(); every() }()
		}
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		req := egRequest(r.IntN(egRules))
		wg.Add(1)
		sent := time.Now()
		go func() {
			defer wg.Done()
			resp, err := c.ShouldRateLimit(context.Background(), req)
			lat[i] = time.Since(sent)
			if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		fmt.Fprintf(os.Stderr, "paced: %d of %d requests failed or were refused\n", f, n)
	}
	return lat
}

// BenchmarkTLS measures what gRPC over TLS costs each service in
// requests a second: envoyproxy/ratelimit and floodgate-rls on one
// redis-server, and floodgate-rls in process, each as two processes on
// BenchmarkRLS's configuration, one serving plaintext and one TLS 1.3
// with client certificates, as Envoy Gateway deploys them (GRPC_SERVER_
// USE_TLS with a CA). 64 callers at once over one connection (its
// handshake before any figure) ask for a random client's descriptor of
// 1,000, alternately of the plaintext process and of the TLS one, four
// rounds each, the benchmark's time split between them. It reports
// plain-ns/req and tls-ns/req, the wall time per request of each, and
// tls-rps-loss-%, the share of the plaintext requests a second that TLS
// loses: 100 × (1 − plain ÷ tls). ns/op is tls-ns/req.
func BenchmarkTLS(b *testing.B) {
	if _, err := redistest.Find(); err != nil && os.Getenv(redistest.Require) != "1" {
		b.Logf("no TLS scenarios: %v", err)
		return
	}
	srv := redistest.Start(b)
	e := newEGTLS(b)
	common, peer, ours := rlsSetup(b)
	clients := make([]*pb.RateLimitRequest, 1000)
	for i := range clients {
		clients[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c" + strconv.Itoa(i)}}}}}
	}
	for _, s := range []struct {
		name, bin string
		env       []string
	}{
		{"envoy-ratelimit", peer, []string{"REDIS_URL=" + srv.Addr, "CACHE_KEY_PREFIX=tls-peer"}},
		{"floodgate-rls-redis", ours, []string{"REDIS_URL=" + srv.Addr, "CACHE_KEY_PREFIX=tls-fg"}},
		{"floodgate-rls-local", ours, nil},
	} {
		env := append(append([]string{}, common...), s.env...)
		plain := startService(b, s.name, s.bin, env, insecure.NewCredentials(), rlsProbe)
		secure := startService(b, s.name+"-tls", s.bin, append(env, e.serverEnv()...), e.proxy, rlsProbe)
		b.Run("scenario=clients-1000-desc-1/impl="+s.name, func(b *testing.B) {
			var errs atomic.Int64
			loop := func(c pb.RateLimitServiceClient) func(*atomic.Bool) int {
				return func(stop *atomic.Bool) int {
					r := rand.New(rand.NewPCG(rand.Uint64(), 3))
					n := 0
					for !stop.Load() {
						resp, err := c.ShouldRateLimit(context.Background(), clients[r.IntN(len(clients))])
						if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
							errs.Add(1)
						}
						n++
					}
					return n
				}
			}
			for _, c := range []pb.RateLimitServiceClient{plain.client, secure.client} {
				runFor(rlsG, 200*time.Millisecond, loop(c)) // connections and scripts warm
			}
			errs.Store(0)
			const rounds = 4
			var ns [2]float64
			var served int64
			for range rounds {
				for i, c := range []pb.RateLimitServiceClient{plain.client, secure.client} {
					n, d := runFor(rlsG, benchTime()/(2*rounds), loop(c))
					ns[i] += float64(d.Nanoseconds()) / float64(n) / rounds
					served += n
				}
			}
			b.ReportMetric(ns[1], "ns/op")
			b.ReportMetric(ns[0], "plain-ns/req")
			b.ReportMetric(ns[1], "tls-ns/req")
			b.ReportMetric(100*(1-ns[0]/ns[1]), "tls-rps-loss-%")
			b.ReportMetric(float64(errs.Load())/float64(served), "failed/req")
		})
	}
}
