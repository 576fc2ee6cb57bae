package bench

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/loov/hrtime"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsG is the concurrent gRPC callers of BenchmarkRLS, as Envoy's many
// workers and requests at once.
const rlsG = 64

// rlsConfig is the rate-limit configuration both servers run: a rule
// per client (1,000 of them), one for the hot descriptor every request
// of three carries, and one per route; limits no request reaches, so
// that every answer is a decision that admits. The token budget is per
// hour, as Envoy AI Gateway's budgets are: per second, every window's end
// would have each client's next request in lease mode wait for a new
// batch (a fixed window's batch ends with its window), which the request
// scenarios measure already.
const rlsConfig = `domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// rlsServer is one rate-limit service under benchmark: a process.
type rlsServer struct {
	name      string
	client    pb.RateLimitServiceClient
	pid       int    // its process
	debug     string // its debug listener's address, which serves pprof
	memcached string // the memcached it keeps its counts on; "": Redis, or in process
}

// BenchmarkRLS compares Envoy's rate-limit services on one redis-server:
// envoyproxy/ratelimit, built from its Go module at the version
// rls/testdata/ratelimit-peer pins, with its default settings, and
// floodgate-rls, per request, in lease mode and in process; and both
// with BACKEND_TYPE=memcache on one memcached (impl=*-memcache, each with
// MEMCACHE_MAX_IDLE_CONNS=64), where memcached is installed; 64 callers
// at once over one gRPC connection, each request from a random client of
// 1,000 with one descriptor (scenario=clients-1000-desc-1), the hot
// descriptor alone (hot-desc-1), a client's, the hot one and a
// route's (clients-1000-desc-3), or Envoy AI Gateway's token budget, a
// client's tokens descriptor with hits_addend 0 (a check at a request's
// start) or its cost of 1 to 1,000 (at its end), half each
// (tokens-1000-desc-1), under both services' default
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT. It reports ns/op as wall time per
// request, p50, p99 and p99.9, cmds/req, the commands Redis ran per
// request (INFO commandstats; a script's own count), scripts/req, the
// scripts among them, and failed/req, the requests answered with an
// error or refused (none should be: the limits are out of reach). On
// memcached it reports mc-cmds/req instead, memcached's commands per
// request from its stats (a get of n keys counts n; see
// memcachedStats), and memcached-cpu-ns/req in place of redis-cpu-ns.
//
// It also reports where the CPU went, in nanoseconds per request: the
// service's process (server-cpu-ns), redis-server's (redis-cpu-ns) and
// the callers' (caller-cpu-ns, this process); and, from a CPU profile of
// the service taken while the load runs a second longer, the service's
// CPU split into gRPC's (grpc-cpu-ns), the store's (store-cpu-ns: its
// Redis layer and client),
// the runtime's alone (runtime-cpu-ns: the garbage collector, the
// scheduler) and the service's own (own-cpu-ns); see cpuShares. With
// FLOODGATE_RLS_PROFILES set to a directory, the profiles are kept there,
// one a scenario and service, the last pass's. Under -headline it takes
// no profile, and reports none of the four. Without redis-server or the
// module proxy it runs none of them, and says so, unless
// FLOODGATE_REQUIRE_REDIS=1.
func BenchmarkRLS(b *testing.B) {
	if _, err := redistest.Find(); err != nil && os.Getenv(redistest.Require) != "1" {
		b.Logf("no rate-limit service scenarios: %v", err)
		return
	}
	srv := redistest.Start(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { admin.Close() })
	servers := startRLSServers(b, srv.Addr, startBenchMemcached(b))
	type scenario struct {
		name  string
		descs func(r *rand.Rand) []*rlv3.RateLimitDescriptor
	}
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	clients := make([]*rlv3.RateLimitDescriptor, 1000)
	for i := range clients {
		clients[i] = entry("client", "c"+strconv.Itoa(i))
	}
	routes := make([]*rlv3.RateLimitDescriptor, 10)
	for i := range routes {
		routes[i] = entry("route", "/r"+strconv.Itoa(i))
	}
	hotDesc := entry("hot", "all")
	// Envoy AI Gateway's token budget: a check (hits_addend 0) when a
	// request arrives, and its tokens (1 to 1,000) when its stream ends;
	// a client's are half of each.
	checks, costs := make([]*rlv3.RateLimitDescriptor, len(clients)), make([]*rlv3.RateLimitDescriptor, len(clients))
	for i := range clients {
		checks[i], costs[i] = entry("tokens", "c"+strconv.Itoa(i)), entry("tokens", "c"+strconv.Itoa(i))
		checks[i].HitsAddend = wrapperspb.UInt64(0)
		costs[i].HitsAddend = wrapperspb.UInt64(uint64(1 + i*7919%1000))
	}
	scenarios := []scenario{
		{"clients-1000-desc-1", func(r *rand.Rand) []*rlv3.RateLimitDescriptor {
			return []*rlv3.RateLimitDescriptor{clients[r.IntN(len(clients))]}
		}},
		{"hot-desc-1", func(*rand.Rand) []*rlv3.RateLimitDescriptor { return []*rlv3.RateLimitDescriptor{hotDesc} }},
		{"clients-1000-desc-3", func(r *rand.Rand) []*rlv3.RateLimitDescriptor {
			return []*rlv3.RateLimitDescriptor{clients[r.IntN(len(clients))], hotDesc, routes[r.IntN(len(routes))]}
		}},
		{"tokens-1000-desc-1", func(r *rand.Rand) []*rlv3.RateLimitDescriptor {
			i := r.IntN(len(clients))
			if r.IntN(2) == 0 {
				return []*rlv3.RateLimitDescriptor{checks[i]}
			}
			return []*rlv3.RateLimitDescriptor{costs[i]}
		}},
	}
	// Each service runs every scenario before the next starts, so that
	// one's background work (lease renewals) never lands in another's
	// figures of Redis's commands.
	for _, s := range servers {
		for _, sc := range scenarios {
			b.Run("scenario="+sc.name+"/impl="+s.name+"/g="+strconv.Itoa(rlsG), func(b *testing.B) {
				var failed atomic.Value
				var errs atomic.Int64
				loop := func(record func([]time.Duration)) func(*atomic.Bool) int {
					return func(stop *atomic.Bool) int {
						r := rand.New(rand.NewPCG(rand.Uint64(), 1))
						var all []time.Duration
						n := 0
						for !stop.Load() {
							req := &pb.RateLimitRequest{Domain: "bench", Descriptors: sc.descs(r)}
							start := stampNow()
							resp, err := s.client.ShouldRateLimit(context.Background(), req)
							if record != nil {
								all = append(all, start.since().duration())
							}
							if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
								// Reported, not failed: a service's error or
								// refusal is a figure of its own.
								errs.Add(1)
								failed.CompareAndSwap(nil, fmt.Sprintf("%s: %v %v", s.name, resp.GetOverallCode(), err))
							}
							n++
						}
						if record != nil {
							record(all)
						}
						return n
					}
				}
				runFor(rlsG, 300*time.Millisecond, loop(nil)) // connections, scripts and leases warm
				errs.Store(0)
				if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				var mu sync.Mutex
				var all []time.Duration
				calibrateStamps()
				redis0, err := redisCPU(context.Background(), admin)
				if err != nil {
					b.Fatal(err)
				}
				var mc0 memcachedStats
				if s.memcached != "" {
					mc0 = readMemcachedStats(b, s.memcached)
				}
				server0, okServer := processCPU(s.pid)
				caller0, okCaller := processCPU(os.Getpid())
				served := timed(b, rlsG, loop(func(a []time.Duration) {
					mu.Lock()
					all = append(all, a...)
					mu.Unlock()
				}))
				server1, _ := processCPU(s.pid)
				caller1, _ := processCPU(os.Getpid())
				redis1, err := redisCPU(context.Background(), admin)
				if err != nil {
					b.Fatal(err)
				}
				perReq := func(d time.Duration) float64 { return float64(d) / float64(served) }
				if s.memcached != "" {
					mc1 := readMemcachedStats(b, s.memcached)
					b.ReportMetric(perReq(mc1.cpu-mc0.cpu), "memcached-cpu-ns/req")
					b.ReportMetric(float64(mc1.cmds-mc0.cmds)/float64(served), "mc-cmds/req")
				} else {
					b.ReportMetric(perReq(redis1-redis0), "redis-cpu-ns/req")
				}
				serverNs := perReq(server1 - server0)
				if okServer {
					b.ReportMetric(serverNs, "server-cpu-ns/req")
				}
				if okCaller {
					b.ReportMetric(perReq(caller1-caller0), "caller-cpu-ns/req")
				}
				b.ReportMetric(float64(errs.Load())/float64(served), "failed/req")
				if msg := failed.Load(); msg != nil {
					b.Logf("the first request that failed or was refused: %v", msg)
				}
				hist := hrtime.NewDurationHistogram(all, &hrtime.HistogramOptions{BinCount: 1})
				b.ReportMetric(hist.P50, "p50-ns")
				b.ReportMetric(hist.P99, "p99-ns")
				b.ReportMetric(hist.P999, "p99.9-ns")
				if s.memcached == "" {
					info, err := admin.Info(context.Background(), "commandstats").Result()
					if err != nil {
						b.Fatal(err)
					}
					cmds, scripts, err := commandCalls(info)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(cmds/float64(served), "cmds/req")
					b.ReportMetric(scripts/float64(served), "scripts/req")
				}

				// The profile, taken under the same load, for a second
				// whatever -benchtime says: not under -headline.
				if headline() {
					return
				}
				var save string
				if dir := os.Getenv("FLOODGATE_RLS_PROFILES"); dir != "" {
					save = filepath.Join(dir, sc.name+"-"+s.name+".pprof")
				}
				var stop atomic.Bool
				var wg sync.WaitGroup
				for range rlsG {
					wg.Add(1)
					go func() {
						defer wg.Done()
						loop(nil)(&stop)
					}()
				}
				shares, profErr := profileShares(context.Background(), s.debug, 1, save)
				stop.Store(true)
				wg.Wait()
				if profErr != nil {
					b.Fatalf("%s's CPU profile: %v", s.name, profErr)
				}
				if okServer {
					b.ReportMetric(shares.grpc*serverNs, "grpc-cpu-ns/req")
					b.ReportMetric(shares.store*serverNs, "store-cpu-ns/req")
					b.ReportMetric(shares.runtime*serverNs, "runtime-cpu-ns/req")
					b.ReportMetric(shares.own*serverNs, "own-cpu-ns/req")
				}
			})
		}
	}
}

// startRLSServers builds and starts both services, each on the same
// configuration, on Redis and in process, and on memcached when
// mcAddr is not "", and stops them when b ends.
func startRLSServers(b *testing.B, redisAddr, mcAddr string) []rlsServer {
	common, peer, ours := rlsSetup(b)
	var out []rlsServer
	start := func(name, bin string, env ...string) {
		out = append(out, startService(b, name, bin, append(append([]string{}, common...), env...), insecure.NewCredentials(), rlsProbe))
	}
	// In the order they run (see BenchmarkRLS): lease mode last, since
	// after its scenarios it gives back and renews what it leased, on
	// Redis and on the CPU, which the service after it would otherwise
	// share (the in-process service, run after it, counted 0.4–0.75 of
	// its Redis commands a request in a headline run).
	start("envoy-ratelimit", peer, "REDIS_URL="+redisAddr)
	start("floodgate-rls-redis", ours, "REDIS_URL="+redisAddr, "CACHE_KEY_PREFIX=bench-redis")
	start("floodgate-rls-local", ours)
	if mcAddr != "" {
		// Both with 64 idle connections a server kept, one a caller:
		// envoyproxy/ratelimit's default of 2 would have both dial and
		// close a connection for most round trips, and run out of
		// ports.
		mc := []string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=" + mcAddr, "MEMCACHE_MAX_IDLE_CONNS=64"}
		start("envoy-ratelimit-memcache", peer, append(mc, "CACHE_KEY_PREFIX=ref_")...)
		out[len(out)-1].memcached = mcAddr
		start("floodgate-rls-memcache", ours, append(mc, "CACHE_KEY_PREFIX=bench-mc")...)
		out[len(out)-1].memcached = mcAddr
	}
	start("floodgate-rls-lease", ours, "REDIS_URL="+redisAddr, "CACHE_KEY_PREFIX=bench-lease", "FLOODGATE_LEASE_MAX=100000")
	return out
}

// rlsSetup writes BenchmarkRLS's configuration into a runtime folder of
// its own and finds both services' binaries (see serviceBinaries): it returns the environment that
// every service of the benchmark starts with (that folder, loopback
// hosts, quiet logs, Redis over TCP), and the binaries of
// envoyproxy/ratelimit and of floodgate-rls.
func rlsSetup(b *testing.B) (common []string, peer, ours string) {
	dir := b.TempDir()
	root := filepath.Join(dir, "runtime")
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(rlsConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	peer, ours = serviceBinaries(b)
	common = []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "LOG_LEVEL=warn", "USE_STATSD=false",
		"REDIS_SOCKET_TYPE=tcp"}
	return common, peer, ours
}

// rlsProbe is the request a service must answer, without an error, to
// be ready.
var rlsProbe = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "hot", Value: "probe"}}}}}

// startService runs a service's binary bin with env and loopback ports
// of its own, connects to its gRPC port with creds, and returns once it
// answers probe without an error (within a minute).
func startService(b *testing.B, name, bin string, env []string, creds credentials.TransportCredentials, probe *pb.RateLimitRequest) rlsServer {
	port, debug := freePort(b), freePort(b)
	env = append(append([]string{}, env...), "GRPC_PORT="+port, "PORT="+freePort(b), "DEBUG_PORT="+debug)
	pid := runProcess(b, bin, env)
	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(creds))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := pb.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ShouldRateLimit(ctx, probe)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never answered: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond) // another process starting
	}
	return rlsServer{name: name, client: c, pid: pid, debug: "127.0.0.1:" + debug}
}

// binsEnv names the environment variable that gives the harness a
// folder for the services' binaries: bench/run.sh sets it to a new
// folder for each run, so that its passes build each binary once
// between them. The first benchmark of a run that needs a binary builds
// it there, and the others (in that pass and in the next ones) use it as
// it is: a folder must not outlive a change to the code. Without it,
// each process builds them once, into a folder of its own that goes
// when the process ends.
const binsEnv = "FLOODGATE_BENCH_BINS"

// services is what serviceBinaries found or built, once a process.
var services struct {
	once       sync.Once
	peer, ours string
	temp       string // the process's own folder, if binsEnv is unset
	err        error
}

// serviceBinaries returns the binaries of envoyproxy/ratelimit, built
// from its Go module at the version rls/testdata/ratelimit-peer pins, and
// of floodgate-rls, built from rls/ (see binsEnv).
func serviceBinaries(b *testing.B) (peer, ours string) {
	s := &services
	s.once.Do(func() {
		dir := os.Getenv(binsEnv)
		if dir == "" {
			if dir, s.err = os.MkdirTemp("", "floodgate-bench-bins-"); s.err != nil {
				return
			}
			s.temp = dir
		} else if s.err = os.MkdirAll(dir, 0o755); s.err != nil {
			return
		}
		s.peer, s.ours = filepath.Join(dir, "ratelimit"), filepath.Join(dir, "floodgate-rls")
		for _, x := range []struct{ dir, bin, pkg string }{
			{"../rls/testdata/ratelimit-peer", s.peer, "github.com/envoyproxy/ratelimit/src/service_cmd"},
			{"../rls", s.ours, "./cmd/floodgate-rls"},
		} {
			if _, err := os.Stat(x.bin); err == nil {
				continue // an earlier pass built it
			}
			if s.err = buildBinary(x.dir, x.bin, x.pkg); s.err != nil {
				return
			}
		}
	})
	if s.err != nil {
		b.Fatal(s.err)
	}
	return s.peer, s.ours
}

// removeServiceBinaries removes the folder that serviceBinaries made for
// this process, if it made one.
func removeServiceBinaries() {
	if services.temp != "" {
		os.RemoveAll(services.temp)
	}
}

// buildBinary builds pkg in the module at dir into bin.
func buildBinary(dir, bin, pkg string) error {
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, out)
	}
	return nil
}

var logLine = regexp.MustCompile(`level=(error|fatal|panic)`)

// runProcess starts bin with env, and kills it when b ends; its errors
// are logged. It returns the process's id.
func runProcess(b *testing.B, bin string, env []string) int {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if logLine.MatchString(sc.Text()) {
				fmt.Fprintln(os.Stderr, filepath.Base(bin)+": "+sc.Text())
			}
		}
		close(done)
	}()
	b.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
	})
	return cmd.Process.Pid
}

func freePort(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
