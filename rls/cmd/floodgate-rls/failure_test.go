package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/rls/internal/peertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// outcome is what a caller sees of one gRPC call: the overall code of an
// answer, or the status of a failure, and how long it took.
type outcome struct {
	code    string
	message string
	took    time.Duration
}

func (o outcome) String() string {
	return fmt.Sprintf("%s %q after %v", o.code, o.message, o.took.Round(time.Millisecond))
}

// call sends req to c with a deadline of d.
func call(c pb.RateLimitServiceClient, req *pb.RateLimitRequest, d time.Duration) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	resp, err := c.ShouldRateLimit(ctx, req)
	took := time.Since(start)
	if err != nil {
		st, _ := status.FromError(err)
		return outcome{code: st.Code().String(), message: st.Message(), took: took}
	}
	return outcome{code: resp.OverallCode.String(), took: took}
}

// postJSON posts req's JSON to the /json endpoint at addr, and returns
// the status code (0 if no answer came within d).
func postJSON(addr, body string, d time.Duration) int {
	c := http.Client{Timeout: d}
	resp, err := c.Post("http://"+addr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSideBySideRedisFails runs floodgate-rls (the binary, with
// FLOODGATE_FAILURE_MODE unset and the default FLOODGATE_REDIS_TIMEOUT
// of 100 ms) and envoyproxy/ratelimit (built from its module at the
// pinned version), each on a redis-server of its own, and sends both
// the same requests, a hit and a check (a descriptor's hits_addend 0),
// with a deadline of 2 s, as Envoy would:
//
//   - Redis stopped (SIGSTOP): the reference waits for Redis with no
//     deadline, so its caller's deadline ends the call: DeadlineExceeded,
//     "context deadline exceeded" (or grpc-go's "stream terminated by
//     RST_STREAM", when the server's cancellation comes first).
//     floodgate-rls answers the same code and message, itself, once its
//     Timeout has run out (and at once when the breaker is open), long
//     before the caller's deadline.
//     Either way Envoy's failure_mode_deny decides. Its /json answers
//     400; the reference's waits for Redis (it sends no deadline), so it
//     is not compared.
//   - Redis back (SIGCONT): both decide on it again, floodgate-rls within
//     its breaker's ProbeEvery (250 ms) and a round trip.
//   - Redis killed: both fail the call with Unknown, each with its Redis
//     client's error (the messages differ: the reference's radix says
//     "response returned from Conn: EOF" and the like, floodgate-rls
//     names the refused connection), and both answer /json 400.
func TestSideBySideRedisFails(t *testing.T) {
	bin := binary(t)
	refBin := peertest.Build(t, peerModule)
	files := map[string]string{"ai.yaml": "domain: ai\ndescriptors:\n  - key: tokens\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"}
	root := runtimeDir(t, files)
	ourRedis, theirRedis := redistest.Start(t), redistest.Start(t)
	ours := startReplica(t, bin, root, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+ourRedis.Addr)

	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	proc := peertest.Start(t, refBin, "USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+theirRedis.Addr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=current", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+strings.Split(httpAddr, ":")[1], "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strings.Split(grpcAddr, ":")[1],
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strings.Split(freeAddr(t), ":")[1], "LOG_LEVEL=warn")
	hit := func(n uint64) *pb.RateLimitRequest {
		return &pb.RateLimitRequest{Domain: "ai", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tokens", Value: "client-a"}}, HitsAddend: wrapperspb.UInt64(n)}}}
	}
	theirs := proc.Dial(t, grpcAddr, hit(0), grpc.WithTransportCredentials(insecure.NewCredentials()))
	reqs := map[string]*pb.RateLimitRequest{"a hit": hit(600), "a check": hit(0)}
	const deadline = 2 * time.Second
	body := `{"domain": "ai", "descriptors": [{"entries": [{"key": "tokens", "value": "client-a"}]}]}`

	for name, req := range reqs {
		a, b := call(theirs, req, deadline), call(ours.client, req, deadline)
		if a.code != "OK" || b.code != "OK" {
			t.Fatalf("%s, Redis up: envoyproxy/ratelimit %v, floodgate-rls %v", name, a, b)
		}
	}

	ourRedis.Pause()
	theirRedis.Pause()
	// grpc-go's caller reports its own deadline as "context deadline
	// exceeded", or, when the server's cancellation of the stream comes
	// first, by that: either is the reference's.
	theirMessages := []string{"context deadline exceeded", "stream terminated by RST_STREAM with error code: CANCEL"}
	for name, req := range reqs {
		a, b := call(theirs, req, deadline), call(ours.client, req, deadline)
		t.Logf("Redis stopped, %s: envoyproxy/ratelimit %v; floodgate-rls %v", name, a, b)
		if a.code != codes.DeadlineExceeded.String() || a.code != b.code || b.message != theirMessages[0] || !slices.Contains(theirMessages, a.message) {
			t.Errorf("Redis stopped, %s: envoyproxy/ratelimit %v, floodgate-rls %v: want the same code and message", name, a, b)
		}
		if b.took > deadline/2 {
			t.Errorf("Redis stopped, %s: floodgate-rls answered after %v, not within its Timeout of 100 ms (and a loaded machine's slack)", name, b.took)
		}
	}
	// In a row, until the breaker opens (three failures) and after: the
	// same answer, at once once it is open.
	for i := range 4 {
		b := call(ours.client, hit(600), deadline)
		if b.code != codes.DeadlineExceeded.String() || b.message != theirMessages[0] || b.took > deadline/2 {
			t.Errorf("Redis stopped, floodgate-rls's call %d in a row: %v", i, b)
		}
		if i == 3 {
			t.Logf("Redis stopped, the breaker open: floodgate-rls %v", b)
		}
	}
	start := time.Now()
	if code := postJSON(ours.http, body, deadline); code != http.StatusBadRequest || time.Since(start) > deadline/2 {
		t.Errorf("Redis stopped: floodgate-rls's /json answered %d after %v, want 400 within its Timeout", code, time.Since(start))
	}

	// Back: both decide on Redis again (what the stalled calls charged
	// once Redis woke, each may have run, is each one's own count).
	decided := func(o outcome) bool { return o.code == "OK" || o.code == "OVER_LIMIT" }
	ourRedis.Resume()
	theirRedis.Resume()
	back := time.Now()
	waitFor(t, "floodgate-rls deciding on Redis again", func() bool { return decided(call(ours.client, hit(0), deadline)) })
	t.Logf("floodgate-rls decided on Redis again %v after its return", time.Since(back).Round(time.Millisecond))
	if a := call(theirs, hit(0), deadline); !decided(a) {
		t.Fatalf("Redis back: envoyproxy/ratelimit %v", a)
	}

	ourRedis.Kill()
	theirRedis.Kill()
	for i := range 2 {
		for name, req := range reqs {
			a, b := call(theirs, req, deadline), call(ours.client, req, deadline)
			t.Logf("Redis killed, %s %d: envoyproxy/ratelimit %v; floodgate-rls %v", name, i, a, b)
			if a.code != codes.Unknown.String() || a.code != b.code {
				t.Errorf("Redis killed, %s %d: envoyproxy/ratelimit %v, floodgate-rls %v: want the same code", name, i, a, b)
			}
		}
	}
	if a, b := postJSON(httpAddr, body, deadline), postJSON(ours.http, body, deadline); a != http.StatusBadRequest || b != a {
		t.Errorf("Redis killed: /json answered %d by envoyproxy/ratelimit, %d by floodgate-rls; want both 400", a, b)
	}
}
