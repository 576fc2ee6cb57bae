package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testmain"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// binary builds floodgate-rls for the test (the Go build cache makes it
// a link after the first).
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the processes run in the full tests")
	}
	bin := filepath.Join(t.TempDir(), "floodgate-rls")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building floodgate-rls: %v\n%s", err, out)
	}
	return bin
}

// replica is one floodgate-rls process.
type replica struct {
	cmd    *exec.Cmd
	client pb.RateLimitServiceClient
	http   string // the HTTP listener's address
	done   chan struct{}
}

var servingLine = regexp.MustCompile(`msg=serving grpc=(\S+) http=(\S+)`)

// replicaAttr and replicaDir, if set, are the process attributes and
// the working directory startReplica gives the process (TestImage's
// user).
var (
	replicaAttr *syscall.SysProcAttr
	replicaDir  string
)

// startReplica runs floodgate-rls with env on root's runtime directory,
// and returns once it serves.
func startReplica(t *testing.T, bin, root string, env ...string) *replica {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.SysProcAttr, cmd.Dir = replicaAttr, replicaDir
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"LOG_LEVEL=info", "RUNTIME_ROOT="+filepath.Join(root, "current"))
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{cmd: cmd, done: make(chan struct{})}
	addr := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1:]
			}
		}
		cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-r.done
	})
	var a string
	select {
	case m := <-addr:
		a, r.http = m[0], m[1]
	case <-r.done:
		t.Fatal("floodgate-rls ended before serving")
	case <-time.After(60 * time.Second):
		t.Fatal("floodgate-rls never served")
	}
	conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.client = pb.NewRateLimitServiceClient(conn)
	return r
}

// stop ends the replica with SIGTERM, as a deployment does, and waits:
// it returns its leases to Redis on the way out.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("floodgate-rls did not stop on SIGTERM")
	}
}

func hot(hits *wrapperspb.UInt64Value) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "hot", Value: "x"}}, HitsAddend: hits}}}
}

// race sends 64 callers' requests, round robin over the replicas, and
// returns how many were admitted.
func race(t *testing.T, rs []*replica, per int, during func(i int64)) int64 {
	var admitted, sent atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				r := rs[(g+i)%len(rs)]
				resp, err := r.client.ShouldRateLimit(context.Background(), hot(nil))
				if n := sent.Add(1); during != nil {
					during(n)
				}
				if err != nil {
					continue // a killed replica's callers
				}
				if resp.OverallCode == pb.RateLimitResponse_OK {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}

// TestReplicas: three floodgate-rls processes on one redis-server,
// raced by 64 gRPC callers on one descriptor: for every algorithm,
// exactly the limit passes per request; in lease mode at most the limit.
// With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT true (a refused hit
// charges nothing), once the processes stop (returning their leases),
// what was admitted plus what Redis holds is the limit. Unset, every hit
// is charged, so the key owes once past the limit; in lease mode a
// replica then refuses while another still holds leased units, which it
// returns into the debt at the stop: the admissions fall short of the
// limit by no more than the leases could hold, and never pass it.
func TestReplicas(t *testing.T) {
	bin := binary(t)
	srv := redistest.Start(t)
	per := 8
	if testmain.Quick() {
		per = 6
	}
	for _, alg := range []string{"fixed_window", "token_bucket", "leaky_bucket", "sliding_counter", "sliding_log"} {
		for _, run := range []struct{ lease, stop string }{{"0", "true"}, {"32", "true"}, {"0", "false"}, {"32", "false"}} {
			lease := run.lease
			t.Run(alg+"/lease="+lease+"/stop="+run.stop, func(t *testing.T) {
				unit := "year" // nothing refills in the run; Redis holds a sliding counter's Limit × Period within 2^52 µs
				if alg == "sliding_counter" {
					unit = "hour"
				}
				root := runtimeDir(t, map[string]string{"d.yaml": fmt.Sprintf("domain: d\ndescriptors:\n  - key: hot\n    rate_limit: {unit: %s, requests_per_unit: 300, algorithm: %s}\n", unit, alg)})
				env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr, "CACHE_KEY_PREFIX=" + fmt.Sprint("replicas-", alg, lease, time.Now().UnixNano()),
					"FLOODGATE_LEASE_MAX=" + lease, "FLOODGATE_FAILURE_MODE=closed", "FLOODGATE_REDIS_TIMEOUT=5s",
					"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=" + run.stop}
				var rs []*replica
				for range 3 {
					rs = append(rs, startReplica(t, bin, root, env...))
				}
				admitted := race(t, rs, per, nil)
				if lease == "0" && admitted != 300 {
					t.Fatalf("admitted %d across three processes, want exactly 300", admitted)
				}
				if admitted > 300 {
					t.Fatalf("admitted %d across three processes, above 300", admitted)
				}
				for _, r := range rs {
					r.stop(t)
				}
				look := startReplica(t, bin, root, env...)
				resp, err := look.client.ShouldRateLimit(context.Background(), hot(wrapperspb.UInt64(0)))
				if err != nil {
					t.Fatal(err)
				}
				left := int64(resp.Statuses[0].LimitRemaining)
				switch {
				case run.stop == "true" && admitted+left != 300:
					t.Fatalf("admitted %d, and Redis holds %d once the processes stopped: want 300 in all", admitted, left)
				case run.stop == "false" && (left != 0 || admitted < 300-3*32):
					t.Fatalf("every hit charged: admitted %d, and Redis holds %d once the processes stopped: want at least %d admitted, and a key that owes", admitted, left, 300-3*32)
				}
			})
		}
	}
}

// TestReplicaKilled: in lease mode, one of three processes is killed
// with SIGKILL mid-run, its leases unreturned: the others never let the
// descriptor pass more than its limit.
func TestReplicaKilled(t *testing.T) {
	bin := binary(t)
	srv := redistest.Start(t)
	root := runtimeDir(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: hot\n    rate_limit: {unit: year, requests_per_unit: 300, algorithm: token_bucket}\n"})
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr, "CACHE_KEY_PREFIX=killed", "FLOODGATE_LEASE_MAX=32", "FLOODGATE_FAILURE_MODE=closed", "FLOODGATE_REDIS_TIMEOUT=5s"}
	var rs []*replica
	for range 3 {
		rs = append(rs, startReplica(t, bin, root, env...))
	}
	var once sync.Once
	admitted := race(t, rs, 10, func(n int64) {
		if n == 100 {
			once.Do(func() { rs[0].cmd.Process.Kill() })
		}
	})
	if admitted > 300 {
		t.Fatalf("admitted %d with a replica killed, above 300", admitted)
	}
	t.Logf("admitted %d of 300 with one of three replicas killed mid-run (its unspent lease lapses)", admitted)
}
