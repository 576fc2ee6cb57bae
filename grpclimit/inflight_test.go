package grpclimit

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// openDuplex opens a FullDuplexCall stream and makes one round trip on
// it, so that its handler runs (and holds its slot) until CloseSend; the
// error is the stream's refusal, if any.
func openDuplex(ctx context.Context, c testpb.TestServiceClient) (testpb.TestService_FullDuplexCallClient, error) {
	s, err := c.FullDuplexCall(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Send(&testpb.StreamingOutputCallRequest{}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if _, err := s.Recv(); err != nil {
		return nil, err
	}
	return s, nil
}

// closeDuplex ends a stream and waits for its handler to have returned.
func closeDuplex(t *testing.T, s testpb.TestService_FullDuplexCallClient) {
	t.Helper()
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the stream's end: %v", err)
	}
}

// inFlightRetry checks that err is an in-flight refusal and returns its
// RetryInfo delay.
func inFlightRetry(t *testing.T, err error) time.Duration {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted || st.Message() != "too many calls in flight" {
		t.Fatalf("error %v, want ResourceExhausted, too many calls in flight", err)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.RetryDelay.AsDuration()
		}
	}
	t.Fatalf("no RetryInfo in %v", st.Details())
	return 0
}

func sample(l *Limiter, m counts.Metric, route, policy, label string) int64 {
	for _, s := range l.AppendCounts(nil) {
		if s.Metric == m && s.Route == route && s.Policy == policy && s.Label == label {
			return s.Value
		}
	}
	return -1
}

// TestInFlightStreams: a client holds at most InFlight streams at once; a
// third is ResourceExhausted with the policy's RetryInfo, counted as
// denied; a stream's slot comes back when it ends; Check takes a slot
// and gives it back at once.
func TestInFlightStreams(t *testing.T) {
	l, c := serve(t, Config{Methods: map[string][]Policy{duplex: {{Name: "conc", InFlight: 2, RetryAfter: 3 * time.Second}}}})
	ctx := context.Background()
	a, err := openDuplex(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openDuplex(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := sample(l, counts.InFlight, duplex, "conc", ""); got != 2 {
		t.Fatalf("gauge with two streams open = %d", got)
	}
	_, err = openDuplex(ctx, c)
	if d := inFlightRetry(t, err); d != 3*time.Second {
		t.Fatalf("RetryInfo %v, want 3s", d)
	}
	local := peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}})
	if err := l.Check(local, duplex); err == nil {
		t.Fatal("Check found a slot free with two of two held")
	}
	if got := sample(l, counts.Requests, duplex, "conc", countinfo.Denied); got != 2 {
		t.Errorf("denied = %d, want 2", got)
	}
	closeDuplex(t, a)
	for range 3 {
		if err := l.Check(local, duplex); err != nil {
			t.Fatalf("Check with a slot free: %v", err)
		}
	}
	d, err := openDuplex(ctx, c)
	if err != nil {
		t.Fatalf("a stream after one ended: %v", err)
	}
	closeDuplex(t, b)
	closeDuplex(t, d)
	if got := sample(l, counts.InFlight, duplex, "conc", ""); got != 0 {
		t.Fatalf("gauge at the end = %d", got)
	}
}

// TestInFlightAllOrNothing: a call that the in-flight policy refuses is
// charged by no rate policy, and one that a rate policy refuses gives its
// slot back; PerMessage charges a stream's messages to the rate alone.
func TestInFlightAllOrNothing(t *testing.T) {
	l, c := serve(t, Config{Methods: map[string][]Policy{duplex: {
		{Name: "conc", InFlight: 1},
		{Name: "hour", Rule: floodgate.Rule{Limit: 3, Period: time.Hour}},
	}}})
	ctx := context.Background()
	held, err := openDuplex(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := openDuplex(ctx, c); err == nil {
			t.Fatal("a second stream under an in-flight limit of 1")
		}
	}
	closeDuplex(t, held)
	for i := range 2 {
		s, err := openDuplex(ctx, c)
		if err != nil {
			t.Fatalf("stream %d after the in-flight refusals: %v (they were charged)", i+2, err)
		}
		closeDuplex(t, s)
	}
	_, err = openDuplex(ctx, c)
	if st, _ := status.FromError(err); st.Message() != "rate limit exceeded" {
		t.Fatalf("the rate's refusal: %v", err)
	}
	if got := sample(l, counts.InFlight, duplex, "conc", ""); got != 0 {
		t.Fatalf("a call the rate refused kept its slot: gauge %d", got)
	}
}

// TestInFlightUnaryAndErrors: a unary call's slot goes back when it
// answers; a policy that mixes in-flight and rate fields is refused.
func TestInFlightUnaryAndErrors(t *testing.T) {
	l, c := serve(t, Config{Methods: map[string][]Policy{unary: {{Name: "conc", InFlight: 1}}}})
	for i := range 20 {
		if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("unary call %d, one at a time: %v", i, err)
		}
	}
	if got := sample(l, counts.InFlight, unary, "conc", ""); got != 0 {
		t.Fatalf("gauge after 20 calls = %d", got)
	}
	_, err := New(Config{Methods: map[string][]Policy{unary: {{Name: "x", InFlight: 2, After: true}}}})
	if err == nil || !strings.Contains(err.Error(), "in-flight") {
		t.Errorf("an After in-flight policy: %v", err)
	}
}
