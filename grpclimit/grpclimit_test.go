package grpclimit

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// service answers unary calls and echoes every message of a full-duplex
// stream.
type service struct {
	testpb.UnimplementedTestServiceServer
}

func (service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (service) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

func (service) FullDuplexCall(s testpb.TestService_FullDuplexCallServer) error {
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// received counts the messages StreamingInputCall's handler has seen.
var received atomic.Int64

// StreamingInputCall counts the messages of a client stream and answers
// their number once it ends.
func (service) StreamingInputCall(s testpb.TestService_StreamingInputCallServer) error {
	n := int32(0)
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: n})
			}
			return err
		}
		n++
		received.Add(1)
	}
}

// StreamingOutputCall answers its one request with three messages.
func (service) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, s testpb.TestService_StreamingOutputCallServer) error {
	for range 3 {
		if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

const (
	input  = "/grpc.testing.TestService/StreamingInputCall"
	output = "/grpc.testing.TestService/StreamingOutputCall"
	unary  = "/grpc.testing.TestService/UnaryCall"
	empty  = "/grpc.testing.TestService/EmptyCall"
	duplex = "/grpc.testing.TestService/FullDuplexCall"
)

func perHour(name string, limit int64) []Policy {
	return []Policy{{Name: name, Rule: floodgate.Rule{Limit: limit, Period: time.Hour}}}
}

// local returns a LocalStore on clock, closed when the test ends (after
// what the test made with it): the Store that New makes when Config.Store
// is nil, on the test's clock.
func local(t testing.TB, clock floodgate.Clock) *floodgate.LocalStore {
	s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: clock})
	t.Cleanup(func() { s.Close() })
	return s
}

// serve runs a real gRPC server with the interceptors on a loopback port
// and returns a client connected to it.
func serve(t *testing.T, cfg Config) (*Limiter, testpb.TestServiceClient) {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l, connect(t, l, ln, "passthrough:///"+ln.Addr().String(), nil)
}

func connect(t *testing.T, l *Limiter, ln net.Listener, target string, dial func(context.Context, string) (net.Conn, error)) testpb.TestServiceClient {
	t.Helper()
	srv := grpc.NewServer(grpc.UnaryInterceptor(l.UnaryServerInterceptor()), grpc.StreamInterceptor(l.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, service{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if dial != nil {
		opts = append(opts, grpc.WithContextDialer(dial))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

// retryDelay checks that err is ResourceExhausted with a RetryInfo detail,
// and returns its delay.
func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		t.Fatalf("error %v, want ResourceExhausted", err)
	}
	if st.Message() != "rate limit exceeded" {
		t.Fatalf("message %q", st.Message())
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.RetryDelay.AsDuration()
		}
	}
	t.Fatalf("no RetryInfo in %v", st.Details())
	return 0
}

func withXFF(xff string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", xff)
}

// TestUnary: a method's own limit, RetryInfo on refusal, another method
// untouched, and a service-wide entry for the rest.
func TestUnary(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	_, c := serve(t, Config{Store: local(t, clock), Methods: map[string][]Policy{unary: perHour("unary", 3)}})
	ctx := context.Background()
	for i := range 3 {
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	if d := retryDelay(t, err); d != 20*time.Minute {
		t.Fatalf("retry delay %v, want 20m", d)
	}
	for range 10 {
		if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("an unlimited method: %v", err)
		}
	}
	clock.Advance(20 * time.Minute)
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("after the wait: %v", err)
	}

	_, c = serve(t, Config{Store: local(t, clock), Methods: map[string][]Policy{
		"/grpc.testing.TestService/": perHour("service", 1), unary: perHour("unary", 5)}})
	if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the service's entry: %v", err)
	}
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("a method's own entry comes first: %v", err)
	}
}

// TestStream: a stream is charged when it opens, and with PerMessage for
// every message too.
func TestStream(t *testing.T) {
	for _, perMessage := range []bool{false, true} {
		clock := floodgate.NewManualClock(0)
		_, c := serve(t, Config{Store: local(t, clock), PerMessage: perMessage, Methods: map[string][]Policy{duplex: perHour("duplex", 3)}})
		s, err := c.FullDuplexCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		sent := 0
		for ; sent < 5; sent++ {
			if err := s.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				break
			}
			if _, err := s.Recv(); err != nil {
				if !perMessage {
					t.Fatalf("message %d: %v", sent, err)
				}
				retryDelay(t, err)
				break
			}
		}
		s.CloseSend()
		if want := map[bool]int{false: 5, true: 2}[perMessage]; sent != want {
			t.Fatalf("PerMessage %v: %d messages through, want %d", perMessage, sent, want)
		}
		for range 2 { // the opening took one of three; two more streams may open, once per message or not
			if perMessage {
				break
			}
			s, _ := c.FullDuplexCall(context.Background())
			s.Send(&testpb.StreamingOutputCallRequest{})
			if _, err := s.Recv(); err != nil {
				t.Fatalf("another stream: %v", err)
			}
			s.CloseSend()
		}
		if !perMessage {
			s, _ := c.FullDuplexCall(context.Background())
			s.Send(&testpb.StreamingOutputCallRequest{})
			_, err := s.Recv()
			retryDelay(t, err)
		}
	}
}

// TestPerMessageAtTheLimit: with PerMessage a stream pays one for its
// opening and one for each message that arrives, and nothing for its end:
// a client stream of 3 messages under a limit of 4 succeeds, and so does
// an empty one under a limit of 1; a fourth message is refused, and the
// handler learns it from Recv before it sees that message. A server
// stream pays for its one request, and a bidi stream at the exact limit
// ends cleanly.
func TestPerMessageAtTheLimit(t *testing.T) {
	ctx := context.Background()
	clientStream := func(limit int64, messages int) (*testpb.StreamingInputCallResponse, error) {
		_, c := serve(t, Config{PerMessage: true, Store: local(t, floodgate.NewManualClock(0)), Methods: map[string][]Policy{input: perHour("in", limit)}})
		s, err := c.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range messages {
			if err := s.Send(&testpb.StreamingInputCallRequest{}); err != nil {
				break // the server ended the stream: CloseAndRecv tells why
			}
		}
		return s.CloseAndRecv()
	}
	received.Store(0)
	if resp, err := clientStream(4, 3); err != nil || resp.AggregatedPayloadSize != 3 {
		t.Fatalf("3 messages under a limit of 4: %v, %v", resp, err)
	}
	if resp, err := clientStream(1, 0); err != nil || resp.AggregatedPayloadSize != 0 {
		t.Fatalf("an empty stream under a limit of 1: %v, %v", resp, err)
	}
	received.Store(0)
	if _, err := clientStream(4, 4); err == nil {
		t.Fatal("4 messages under a limit of 4 (the opening took one): the fourth was not refused")
	} else {
		retryDelay(t, err)
	}
	if n := received.Load(); n != 3 {
		t.Fatalf("the handler saw %d messages, want the 3 admitted", n)
	}

	_, c := serve(t, Config{PerMessage: true, Store: local(t, floodgate.NewManualClock(0)), Methods: map[string][]Policy{output: perHour("out", 2)}})
	out, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := out.Recv(); errors.Is(err, io.EOF) {
			if i != 3 {
				t.Fatalf("server stream under a limit of 2: %d messages", i)
			}
			break
		} else if err != nil {
			t.Fatalf("server stream under a limit of 2 (opening and request): %v", err)
		}
	}

	_, c = serve(t, Config{PerMessage: true, Store: local(t, floodgate.NewManualClock(0)), Methods: map[string][]Policy{duplex: perHour("duplex", 4)}})
	bidi, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := bidi.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
			t.Fatalf("bidi message %d: %v", i, err)
		}
		if _, err := bidi.Recv(); err != nil {
			t.Fatalf("bidi message %d: %v", i, err)
		}
	}
	bidi.CloseSend()
	if _, err := bidi.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("bidi at the exact limit ended with %v, want a clean end", err)
	}
}

// TestDefaultBounds: the zero-value Config bounds each policy's keys
// (here a sliding log whose Limit makes the default bound its floor,
// 1,024: each of the table's shards holds at most its share, so fewer may
// be held, never more: once, under arm64 emulation in make check, 853);
// a Store with MaxKeys floodgate.Unbounded has none. The test holds the bound to at
// most 1,024, and to at least half of it, so that a bound far below what
// was asked fails too.
func TestDefaultBounds(t *testing.T) {
	log := []Policy{{Name: "log", Algorithm: floodgate.SlidingLog, Rule: floodgate.Rule{Limit: 1_000_000, Period: time.Hour}}}
	unbounded := floodgate.NewLocalStore(floodgate.LocalStoreConfig{MaxKeys: floodgate.Unbounded, IdleTTL: floodgate.Never})
	defer unbounded.Close()
	for _, tc := range []struct {
		name        string
		cfg         Config
		least, most int
	}{
		{"the default Store", Config{Default: log}, 512, 1024},
		{"a Store of MaxKeys Unbounded", Config{Default: log, Store: unbounded}, 1100, 1100},
	} {
		l, err := New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1100 {
			l.table.Load().deflt.For("").Decide(context.Background(), "client-"+strconv.Itoa(i), 1, nil, new(floodgate.Decision))
		}
		got := int64(-1)
		for _, c := range l.AppendCounts(nil) {
			if c.Metric == counts.Keys {
				got = c.Value
			}
		}
		if got < int64(tc.least) || got > int64(tc.most) {
			t.Errorf("%s: %d keys held after 1,100 clients, want %d to %d", tc.name, got, tc.least, tc.most)
		}
		l.Close()
	}
}

// TestProxiesAndKeys: an untrusted peer's x-forwarded-for buys nothing; a
// trusted one's names the client; Key can key by anything else.
func TestProxiesAndKeys(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	_, c := serve(t, Config{Store: local(t, clock), Default: perHour("d", 2)})
	passed := 0
	for _, ip := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"} {
		if _, err := c.EmptyCall(withXFF(ip), &testpb.Empty{}); err == nil {
			passed++
		}
	}
	if passed != 2 {
		t.Fatalf("untrusted: %d passed, want 2", passed)
	}
	_, c = serve(t, Config{Store: local(t, clock), Default: perHour("d", 2), TrustedProxies: []string{"127.0.0.0/8"}})
	for _, ip := range []string{"203.0.113.1", "203.0.113.2"} {
		for i := range 3 {
			_, err := c.EmptyCall(withXFF("198.51.100.9, "+ip), &testpb.Empty{})
			if (err == nil) != (i < 2) {
				t.Fatalf("client %s call %d: %v", ip, i, err)
			}
		}
	}
	_, c = serve(t, Config{Store: local(t, clock), Default: perHour("d", 1), Key: func(ctx context.Context, method, client string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		return method + "|" + client + "|" + md.Get("user")[0]
	}})
	for _, u := range []string{"alice", "bob"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "user", u)
		if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if _, err := c.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s again: %v", u, err)
		}
	}
}

// TestBufconn: over an in-memory connection the peer has no IP address;
// every such peer shares the fixed key, and the limit still holds.
func TestBufconn(t *testing.T) {
	l, err := New(Config{Store: local(t, floodgate.NewManualClock(0)), Default: perHour("d", 2)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ln := bufconn.Listen(1 << 20)
	c := connect(t, l, ln, "passthrough:///bufnet", func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) })
	var errs []error
	for range 3 {
		_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
		errs = append(errs, err)
	}
	if errs[0] != nil || errs[1] != nil || status.Code(errs[2]) != codes.ResourceExhausted {
		t.Fatalf("bufconn calls: %v", errs)
	}
}

// TestNewErrors: bad configurations are errors.
func TestNewErrors(t *testing.T) {
	ok := perHour("p", 1)
	for name, cfg := range map[string]Config{
		"no slash":       {Methods: map[string][]Policy{"Service/Method": ok}},
		"no service":     {Methods: map[string][]Policy{"//Method": ok}},
		"three parts":    {Methods: map[string][]Policy{"/a/b/c": ok}},
		"no policies":    {Methods: map[string][]Policy{unary: nil}},
		"empty name":     {Methods: map[string][]Policy{unary: perHour("", 1)}},
		"duplicate name": {Methods: map[string][]Policy{unary: append(perHour("p", 1), ok...)}},
		"bad rule":       {Methods: map[string][]Policy{unary: perHour("p", -1)}},
		"empty default":  {Default: []Policy{}},
		"bad cidr":       {TrustedProxies: []string{"300.0.0.0/8"}},
		"ipv6 prefix":    {IPv6Prefix: 200},
	} {
		if l, err := New(cfg); err == nil {
			l.Close()
			t.Errorf("%s: no error", name)
		}
	}
}

// init registers the token bucket again under a name of the tests' own:
// to floodgate, a registered algorithm, which MaxKeys cannot bound.
func init() {
	err := testhook.Register("grpclimit_test_registered", func(r floodgate.Rule) (keystate.Algorithm, error) {
		a, err := testhook.Algorithm(floodgate.Config{Rule: r})
		if err != nil {
			return nil, err
		}
		return a.(keystate.Algorithm), nil
	})
	if err != nil {
		panic(err)
	}
}

// TestRegisteredAlgorithm: a registered algorithm, which MaxKeys cannot
// bound, is unbounded on the default Store and limits there; on a Store
// with a bound, New fails, saying to set MaxKeys to 0 or Unbounded.
func TestRegisteredAlgorithm(t *testing.T) {
	cfg := Config{Methods: map[string][]Policy{unary: {{Name: "p", Algorithm: "grpclimit_test_registered",
		Rule: floodgate.Rule{Limit: 1, Period: time.Hour}}}}}
	bounded := floodgate.NewLocalStore(floodgate.LocalStoreConfig{MaxKeys: 100})
	defer bounded.Close()
	cfg.Store = bounded
	_, err := New(cfg)
	if err == nil {
		t.Fatal("New bounded a registered algorithm")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "grpclimit: method ") || !strings.Contains(msg, "MaxKeys to 0 or Unbounded") {
		t.Fatalf("error %q does not say to set MaxKeys to 0 or Unbounded", msg)
	}
	cfg.Store = nil
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Check(context.Background(), unary); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if err := l.Check(context.Background(), unary); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted", err)
	}
}
