package rls

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/redislimit"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// storeTimeout is the Store's Timeout in the tests of a stopped Redis: a
// request must end within it and a half, which a request that waited
// twice cannot.
const storeTimeout = time.Second

// checkOf is a check of descriptor d: its own hits_addend of 0.
func checkOf(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(0)
	return d
}

// TestRedisStoppedOneWait stops Redis (SIGSTOP) under each FailureMode and
// sends a request that needs several calls of the Store: an enforced
// descriptor (its decision, and under FailClosed, whose refusal is
// charged into debt, a charge after it) and two checks, looked at after
// the decision. The request ends within one Timeout and a half, so that
// it waited on Redis once (before, FailOpen's and FailLocal's took three
// Timeouts, the decision and each check; FailClosed's six, its charge
// and the checks again after it), and is answered by
// the mode: OK (open), OVER_LIMIT (closed), OK by the rule in process
// (local), and under FailError the call fails as envoyproxy/ratelimit's
// does when its Redis stalls: DeadlineExceeded, "context deadline
// exceeded". The JSON endpoint answers that failure 400, as that
// server's does any error.
func TestRedisStoppedOneWait(t *testing.T) {
	cfg := mustConfig(t, basic)
	for _, tc := range []struct {
		mode redislimit.FailureMode
		want pb.RateLimitResponse_Code
	}{
		{redislimit.FailOpen, pb.RateLimitResponse_OK},
		{redislimit.FailClosed, pb.RateLimitResponse_OVER_LIMIT},
		{redislimit.FailLocal, pb.RateLimitResponse_OK},
		{redislimit.FailError, 0},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			st := store(t, redisClient(t, srv.Addr), redislimit.Config{Prefix: "one-wait", FailureMode: tc.mode, Timeout: storeTimeout, BreakAfter: 1000})
			s, c := serve(t, cfg, Options{Store: st})
			req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("small", "a"), checkOf(desc("big", "a")), checkOf(desc("small", "b"))}}
			if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != pb.RateLimitResponse_OK {
				t.Fatalf("Redis up: %v, %v", r, err)
			}
			srv.Pause()
			defer srv.Resume()
			start := time.Now()
			r, err := c.ShouldRateLimit(context.Background(), req)
			if took := time.Since(start); took > storeTimeout*3/2 {
				t.Errorf("the request took %v, past one Timeout (%v) and a half", took, storeTimeout)
			}
			if tc.mode != redislimit.FailError {
				if err != nil || r.OverallCode != tc.want {
					t.Fatalf("%v, %v; want %v", r, err, tc.want)
				}
				return
			}
			if st, _ := status.FromError(err); st.Code() != codes.DeadlineExceeded || st.Message() != "context deadline exceeded" {
				t.Fatalf("%v, %v; want DeadlineExceeded, \"context deadline exceeded\"", r, err)
			}
			h := httptest.NewServer(s.JSONHandler())
			defer h.Close()
			start = time.Now()
			resp, err := http.Post(h.URL, "application/json", strings.NewReader(`{"domain": "d", "descriptors": [{"entries": [{"key": "small", "value": "a"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if took := time.Since(start); resp.StatusCode != http.StatusBadRequest || took > storeTimeout*3/2 {
				t.Fatalf("/json with Redis stopped: %d after %v, want 400 within one Timeout and a half", resp.StatusCode, took)
			}
		})
	}
}

// TestRedisKilledFailError: under FailError, a Redis that refuses its
// connections (killed) fails the call with Unknown and the Store's error,
// the code envoyproxy/ratelimit's Redis errors reach its caller with. The
// client dials once, as floodgate-rls's does: go-redis's default would
// dial again until the Timeout, and the call would fail as a timeout.
func TestRedisKilledFailError(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { rc.Close() })
	st := store(t, rc, redislimit.Config{Prefix: "killed", FailureMode: redislimit.FailError, Timeout: storeTimeout})
	_, c := serve(t, mustConfig(t, basic), Options{Store: st})
	if r := ask(t, c, "d", desc("small", "a")); r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("Redis up: %v", r)
	}
	srv.Kill()
	for i := range 4 { // the breaker opens after 3: its answer names the failure that opened it
		_, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("small", "a")}})
		if st, _ := status.FromError(err); st.Code() != codes.Unknown || !strings.Contains(st.Message(), "redislimit: Redis did not decide: ") ||
			!strings.Contains(st.Message(), "connection refused") {
			t.Fatalf("call %d, Redis killed: %v; want Unknown with the Store's error", i, err)
		}
	}
}
