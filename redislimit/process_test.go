package redislimit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The exactness test's shape: processes × goroutines × attempts racing for
// one key under a rule of limit per period. The period is so long that the
// refill over the test is far below one token, and its windows' edges (at
// multiples of 10,000 hours of Redis's clock) are a year apart.
const (
	childProcesses  = 4
	childGoroutines = 16
	childAttempts   = 25
	exactLimit      = 100
	exactPeriod     = 10_000 * time.Hour
)

// childEnv names the server a child process works against.
const childEnv = "REDISLIMIT_CHILD"

// TestExactAcrossProcesses starts four OS processes of this test binary,
// each with 16 goroutines that race for one key in one Redis, released
// together: for every algorithm, exactly Limit requests are admitted in
// all. In lease mode each process leases batches of up to 16 units and
// closes its Limiter at the end: at most Limit are admitted, and what they
// admitted plus what Redis then has left is exactly Limit.
func TestExactAcrossProcesses(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("a child process runs TestChildProcess only")
	}
	srv := redistest.Start(t)
	for _, run := range []struct{ alg, mode string }{
		{floodgate.TokenBucket, "request"}, {floodgate.LeakyBucket, "request"}, {floodgate.FixedWindow, "request"}, {floodgate.SlidingCounter, "request"},
		{floodgate.SlidingLog, "request"},
		{floodgate.TokenBucket, "lease"}, {floodgate.LeakyBucket, "lease"}, {floodgate.FixedWindow, "lease"}, {floodgate.SlidingCounter, "lease"},
		{floodgate.SlidingLog, "lease"},
	} {
		alg := run.alg
		t.Run(alg+"/"+run.mode, func(t *testing.T) {
			type child struct {
				cmd   *exec.Cmd
				stdin io.WriteCloser
				out   *bufio.Scanner
			}
			var children []child
			for i := 0; i < childProcesses; i++ {
				args := []string{os.Args[0], "-test.run=^TestChildProcess$", "-test.count=1", "-test.v"}
				if emu := os.Getenv("FLOODGATE_EMULATOR"); emu != "" {
					args = append([]string{emu}, args...) // make test-arm64: this binary runs under qemu
				}
				cmd := exec.Command(args[0], args[1:]...)
				cmd.Env = append(os.Environ(), childEnv+"="+srv.Addr+" "+alg+" "+run.mode)
				cmd.Stderr = os.Stderr
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				children = append(children, child{cmd, stdin, bufio.NewScanner(stdout)})
			}
			// Each child says "ready" once its goroutines wait at the
			// gate; a byte on its stdin opens it.
			for _, c := range children {
				if !scanFor(c.out, "ready") {
					t.Fatal("a child process never became ready")
				}
			}
			for _, c := range children {
				c.stdin.Write([]byte("go\n"))
				c.stdin.Close()
			}
			total := 0
			for _, c := range children {
				var admitted int
				found := false
				for c.out.Scan() {
					if _, err := fmt.Sscanf(c.out.Text(), "admitted %d", &admitted); err == nil {
						found = true
					}
				}
				if err := c.cmd.Wait(); err != nil || !found {
					t.Fatalf("a child process failed: %v (reported a count: %v)", err, found)
				}
				total += admitted
			}
			if run.mode == "request" && total != exactLimit || total > exactLimit {
				t.Fatalf("%d processes × %d goroutines × %d attempts admitted %d; want exactly %d",
					childProcesses, childGoroutines, childAttempts, total, exactLimit)
			}
			c := client(t, srv)
			l := mustNew(t, c, Config{Algorithm: alg, Rule: floodgate.Rule{Limit: exactLimit, Period: exactPeriod}, Prefix: run.mode})
			p, err := l.Peek(context.Background(), "shared")
			if err != nil {
				t.Fatal(err)
			}
			left := 0 // Peek's Remaining is after the request it answers for
			if p.Allowed {
				left = int(p.Remaining) + 1
			}
			if left+total != exactLimit {
				t.Fatalf("admitted %d, and Redis has %d left after every process closed; want %d in all", total, left, exactLimit)
			}
			t.Logf("admitted %d of %d", total, exactLimit)
		})
	}
}

func scanFor(sc *bufio.Scanner, word string) bool {
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == word {
			return true
		}
	}
	return false
}

// TestChildProcess is one of TestExactAcrossProcesses's processes; it does
// nothing in an ordinary run.
func TestChildProcess(t *testing.T) {
	env := os.Getenv(childEnv)
	if env == "" {
		t.Skip("run by TestExactAcrossProcesses in its child processes")
	}
	f := strings.Fields(env)
	addr, alg, mode := f[0], f[1], f[2]
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: childGoroutines})
	defer c.Close()
	cfg := Config{Algorithm: alg, Rule: floodgate.Rule{Limit: exactLimit, Period: exactPeriod}, Timeout: 10 * time.Second,
		FailureMode: FailClosed, Prefix: mode}
	if mode == "lease" {
		cfg.Lease = Lease{Max: 16, TTL: time.Hour}
	}
	l := mustNew(t, c, cfg)
	gate := make(chan struct{})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < childGoroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			for i := 0; i < childAttempts; i++ {
				d, err := l.Allow(context.Background(), "shared")
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	close(gate)
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Errors != 0 || s.Fallbacks != 0 {
		t.Fatalf("Redis failed during the test: %+v", s)
	}
	fmt.Printf("admitted %d\n", admitted.Load())
}
