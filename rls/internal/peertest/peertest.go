// Package peertest builds, runs and reads envoyproxy/ratelimit, the
// service floodgate-rls is compared with, for the side-by-side tests.
// The reference is built from its Go module at the version a directory's
// go.mod pins, never imported: it is what floodgate-rls is measured
// against, not a part of it.
package peertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"google.golang.org/grpc"
)

// Build builds the reference server from the module in dir (whose go.mod
// requires github.com/envoyproxy/ratelimit) and returns the binary's
// path. The Go build cache makes every build after the first a link.
//
// It skips the test under -short, and where there is no go command or
// the module cannot be fetched, unless FLOODGATE_REQUIRE_REDIS=1 (CI),
// under which a failed build fails the test.
func Build(t testing.TB, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the reference server is built and run by the full tests (make test, make check), not the cross-platform ones")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build envoyproxy/ratelimit with")
	}
	bin := filepath.Join(t.TempDir(), "ratelimit")
	cmd := exec.Command(gobin, "build", "-o", bin, "github.com/envoyproxy/ratelimit/src/service_cmd")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv(redistest.Require) == "1" {
			t.Fatalf("building envoyproxy/ratelimit: %v\n%s", err, out)
		}
		t.Skipf("cannot build envoyproxy/ratelimit (is the Go module proxy reachable?): %v\n%s", err, out)
	}
	return bin
}

// Process is a running reference server.
type Process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs strings.Builder
}

// Start runs the binary bin with env added to this process's
// environment, until the test ends.
func Start(t testing.TB, bin string, env ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(bin)}
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	return p
}

// Logs is what the server has written to its standard error so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Dial connects to the server's gRPC address with opts, and waits up to
// a minute for it to answer probe without an error (the reference
// answers an error until it has a configuration).
func (p *Process) Dial(t testing.TB, addr string, probe *pb.RateLimitRequest, opts ...grpc.DialOption) pb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := pb.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ShouldRateLimit(ctx, probe)
		cancel()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit never answered: %v\n%s", err, p.Logs())
		}
		time.Sleep(50 * time.Millisecond) // waiting on another process's start, not asserting a time
	}
}

// Answer is a response as the comparisons read it: every field a client
// of the service sees.
func Answer(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, s := range r.Statuses {
		fmt.Fprintf(&b, " [%s left=%d reset=%ds", s.Code, s.LimitRemaining, s.DurationUntilReset.GetSeconds())
		if l := s.CurrentLimit; l != nil {
			fmt.Fprintf(&b, " limit=%d/%s", l.RequestsPerUnit, l.Unit)
			if l.Name != "" {
				fmt.Fprintf(&b, " name=%s", l.Name)
			}
		}
		b.WriteString("]")
	}
	for _, h := range r.ResponseHeadersToAdd {
		fmt.Fprintf(&b, " %s=%s", h.Key, h.Value)
	}
	if m := r.DynamicMetadata; m != nil {
		j, err := json.Marshal(m.AsMap()) // its keys sorted
		if err != nil {
			j = []byte(err.Error())
		}
		fmt.Fprintf(&b, " metadata=%s", j)
	}
	return b.String()
}

// Request is a request of domain for hits, with descriptors written as
// key=value pairs separated by commas ("a=1,b=2"; "a" alone has an empty
// value).
func Request(domain string, hits uint32, descs ...string) *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descs {
		desc := &rlv3.RateLimitDescriptor{}
		for _, e := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(e, "=")
			desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, desc)
	}
	return r
}

// Times is r n times over.
func Times(n int, r *pb.RateLimitRequest) []*pb.RateLimitRequest {
	out := make([]*pb.RateLimitRequest, n)
	for i := range out {
		out[i] = r
	}
	return out
}
