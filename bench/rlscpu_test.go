package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// processCPU is the CPU time the threads of process pid have run, from
// Linux's /proc/<pid>/task/*/schedstat (nanoseconds on a CPU); false
// where that cannot be read.
func processCPU(pid int) (time.Duration, bool) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that ended meanwhile
		}
		f, _, _ := strings.Cut(string(b), " ")
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, false
		}
		sum += time.Duration(ns)
	}
	return sum, true
}

// redisCPU is the CPU time redis-server has used, user and system, from
// INFO cpu (microseconds).
func redisCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				s, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO cpu's %s%q: %w", f, v, err)
				}
				sum += s
			}
		}
	}
	return time.Duration(sum * float64(time.Second)), nil
}

// cpuShares is what a CPU profile of a rate-limit service spent on: the
// share of its samples in gRPC (grpc-go, x/net's HTTP/2, protobuf and the
// generated Envoy types: receiving, decoding, encoding and sending), in
// the store (the code that talks to Redis: each service's Redis layer,
// floodgate's redislimit and envoyproxy/ratelimit's src/redis, and their
// clients, go-redis and radix; or to memcached: memcachelimit,
// src/memcached and gomemcache), in the Go runtime with no caller of the
// service's own (garbage collection, the scheduler, the network poller),
// and in the service itself, everything else: matching descriptors,
// deciding in process, building the answer, its metrics and logs.
type cpuShares struct {
	grpc, store, runtime, own float64
}

// profileShares reads a CPU profile of seconds from a service's
// /debug/pprof/profile at debug, while load runs, and sorts its samples
// by the leaf-most frame outside Go's standard library (see cpuShares):
// a call into the library, as an allocation or a write on a socket, is
// the cost of the code that made it. It keeps the profile at save
// when save is not empty.
func profileShares(ctx context.Context, debug string, seconds int, save string) (cpuShares, error) {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debug, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return cpuShares{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cpuShares{}, err
	}
	defer resp.Body.Close()
	prof, err := io.ReadAll(resp.Body)
	if err != nil {
		return cpuShares{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return cpuShares{}, fmt.Errorf("%s: %s: %s", url, resp.Status, prof)
	}
	f := save
	if f == "" {
		tmp, err := os.CreateTemp("", "rls-*.pprof")
		if err != nil {
			return cpuShares{}, err
		}
		f = tmp.Name()
		tmp.Close()
		defer os.Remove(f)
	}
	if err := os.WriteFile(f, prof, 0o644); err != nil {
		return cpuShares{}, err
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-traces", f).Output()
	if err != nil {
		return cpuShares{}, fmt.Errorf("go tool pprof -traces: %w", err)
	}
	return sortTraces(out)
}

// The classes of a function in a profile; see cpuShares.
const (
	classLibrary = iota // Go's standard library: its caller decides
	classGRPC
	classStore
	classOwn
)

// sortTraces adds up pprof's -traces output into cpuShares: a sample
// whose every frame is in the standard library is the runtime's.
func sortTraces(out []byte) (cpuShares, error) {
	var sum [4]float64 // by class; classLibrary holds the runtime's
	var total, weight float64
	class := classLibrary
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			sum[class] += weight
			total += weight
			weight, class = 0, classLibrary
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if weight == 0 {
			// A sample's first line: its time and its leaf function.
			if len(fields) != 2 {
				continue
			}
			d, err := time.ParseDuration(fields[0])
			if err != nil {
				continue // the header
			}
			weight = float64(d)
		}
		if class == classLibrary {
			class = classify(fields[len(fields)-1])
		}
	}
	sum[class] += weight
	total += weight
	if err := sc.Err(); err != nil {
		return cpuShares{}, err
	}
	if total == 0 {
		return cpuShares{}, fmt.Errorf("the profile has no samples")
	}
	return cpuShares{grpc: sum[classGRPC] / total, store: sum[classStore] / total, runtime: sum[classLibrary] / total, own: sum[classOwn] / total}, nil
}

// classify is the class of a function named as pprof names it, such as
// google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders.
func classify(fn string) int {
	pkg := fn
	slash := strings.LastIndex(pkg, "/") + 1
	if j := strings.Index(pkg[slash:], "."); j >= 0 {
		pkg = pkg[:slash+j]
	}
	first, _, _ := strings.Cut(pkg, "/")
	if pkg == "main" {
		return classOwn
	}
	if !strings.Contains(first, ".") {
		return classLibrary
	}
	for _, p := range []string{"google.golang.org/grpc", "golang.org/x/net/http2", "google.golang.org/protobuf", "github.com/golang/protobuf", "github.com/envoyproxy/go-control-plane", "github.com/envoyproxy/protoc-gen-validate"} {
		if strings.HasPrefix(pkg, p) {
			return classGRPC
		}
	}
	for _, p := range []string{"github.com/redis/go-redis", "github.com/mediocregopher/radix",
		"github.com/floodgate-go/floodgate/redislimit", "github.com/envoyproxy/ratelimit/src/redis",
		"github.com/bradfitz/gomemcache", "github.com/floodgate-go/floodgate/memcachelimit", "github.com/envoyproxy/ratelimit/src/memcached"} {
		if strings.HasPrefix(pkg, p) {
			return classStore
		}
	}
	return classOwn
}
