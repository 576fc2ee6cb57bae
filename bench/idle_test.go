package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// idleFor is how long BenchmarkIdle leaves the service idle before it
// reads what idling cost.
const idleFor = 10 * time.Second

// BenchmarkIdle measures what rules cost floodgate-rls while nobody asks
// for them: the service as a process on a redis-server, in lease mode
// (FLOODGATE_LEASE_MAX=1000), with a configuration of 1,000 or 10,000
// rules (scenario=rules-N), each asked once over gRPC and then left idle
// for 10 s. It reports the CPU the process used over those 10 s as a
// share of one core (idle-cpu-%), the goroutines it runs after them
// beyond those it ran before any request (goroutines-added), the live
// heap after them beyond the heap before any request, per rule
// (heap-B/rule: what the rules hold, their keys' leases having gone back
// by then), and its resident memory (rss-MB). Without redis-server it
// runs none, and says so, unless FLOODGATE_REQUIRE_REDIS=1.
func BenchmarkIdle(b *testing.B) {
	if _, err := redistest.Find(); err != nil && os.Getenv(redistest.Require) != "1" {
		b.Logf("no idle scenarios: %v", err)
		return
	}
	srv := redistest.Start(b)
	_, bin := serviceBinaries(b)
	for _, n := range []int{1000, 10000} {
		b.Run("scenario=rules-"+strconv.Itoa(n)+"/impl=floodgate-rls-lease", func(b *testing.B) {
			benchIdle(b, bin, srv.Addr, n)
		})
	}
}

// benchIdle runs one scenario of BenchmarkIdle: n rules.
func benchIdle(b *testing.B, bin, redisAddr string, n int) {
	dir := b.TempDir()
	cfgDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		b.Fatal(err)
	}
	var cfg strings.Builder
	cfg.WriteString("domain: idle\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&cfg, "  - key: rule\n    value: r%d\n    rate_limit: {unit: second, requests_per_unit: 1000}\n", i)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "idle.yaml"), []byte(cfg.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	port, debug := freePort(b), freePort(b)
	pid := runProcess(b, bin, []string{"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"LOG_LEVEL=warn", "USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"CACHE_KEY_PREFIX=bench-idle-" + strconv.Itoa(n), "FLOODGATE_LEASE_MAX=1000",
		// What the rules hold is measured, not how fast: a round trip
		// that a loaded machine slows past the default Timeout must not
		// fail the run (it failed one under a load of 9 on 2 cores).
		"FLOODGATE_REDIS_TIMEOUT=10s",
		"GRPC_PORT=" + port, "PORT=" + freePort(b), "DEBUG_PORT=" + debug})
	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	ask := func(ctx context.Context, i int) error {
		_, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "idle", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "rule", Value: "r" + strconv.Itoa(i)}}}}})
		return err
	}
	debugAddr := "127.0.0.1:" + debug
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "idle", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "none", Value: "probe"}}}}})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("floodgate-rls never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the process starting
	}
	g0, h0 := goroutinesAndHeap(b, debugAddr)

	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := ask(context.Background(), i); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatalf("a rule's request failed: %v", err)
	}
	cpu0, ok0 := processCPU(pid)
	time.Sleep(idleFor)
	cpu1, ok1 := processCPU(pid)
	g1, h1 := goroutinesAndHeap(b, debugAddr)
	if ok0 && ok1 {
		b.ReportMetric(100*float64(cpu1-cpu0)/float64(idleFor), "idle-cpu-%")
	}
	b.ReportMetric(float64(g1-g0), "goroutines-added")
	b.Logf("goroutines %d then %d; heap %d then %d", g0, g1, h0, h1)
	b.ReportMetric(float64(h1-h0)/float64(n), "heap-B/rule")
	if rss, ok := processRSS(pid); ok {
		b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
	}
	b.ReportMetric(float64(idleFor.Nanoseconds()), "ns/op")
}

// goroutinesAndHeap reads a Go process's goroutines and live heap (after
// a collection) from its pprof endpoints at addr.
func goroutinesAndHeap(b *testing.B, addr string) (goroutines, heap int64) {
	get := func(path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			b.Fatal(err)
		}
		return string(body)
	}
	g := get("/debug/pprof/goroutine?debug=1")
	first, _, _ := strings.Cut(g, "\n")
	if _, err := fmt.Sscanf(first, "goroutine profile: total %d", &goroutines); err != nil {
		b.Fatalf("goroutine profile: %q: %v", first, err)
	}
	sc := bufio.NewScanner(strings.NewReader(get("/debug/pprof/heap?gc=1&debug=1")))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			h, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return goroutines, h
		}
	}
	b.Fatal("the heap profile holds no HeapAlloc")
	return 0, 0
}

// processRSS is a process's resident memory, in bytes.
func processRSS(pid int) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}
