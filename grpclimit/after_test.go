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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// spender is a service whose calls cost 600 units, known when they end,
// reported as way says: "report" (Report), "trailer" (grpc.SetTrailer, or
// the stream's SetTrailer) or "header" (grpc.SetHeader, or the stream's
// SetHeader). A stream reports when its three messages are sent; with
// "report", 200 after each.
type spender struct {
	testpb.UnimplementedTestServiceServer
	way string
}

func (s spender) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	switch s.way {
	case "report":
		Report(ctx, 600)
	case "trailer":
		grpc.SetTrailer(ctx, metadata.Pairs("x-cost", "600", "x-other", "kept"))
	case "header":
		grpc.SetHeader(ctx, metadata.Pairs("x-cost", "600", "x-other", "kept"))
	}
	return &testpb.SimpleResponse{}, nil
}

func (s spender) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, st testpb.TestService_StreamingOutputCallServer) error {
	if s.way == "header" {
		st.SetHeader(metadata.Pairs("x-cost", "600", "x-other", "kept"))
	}
	for range 3 {
		if err := st.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
		if s.way == "report" {
			Report(st.Context(), 200)
		}
	}
	if s.way == "trailer" {
		st.SetTrailer(metadata.Pairs("x-cost", "600", "x-other", "kept"))
	}
	return nil
}

// spendServer runs spender with way behind interceptors whose every call
// has a budget of 1,000 units an hour, an After policy of estimate 0,
// in process on a manual clock, on a real loopback server.
func spendServer(t *testing.T, way string) testpb.TestServiceClient {
	t.Helper()
	key := "x-cost"
	if way == "report" {
		key = ""
	}
	l, err := New(Config{
		Default: []Policy{{Name: "budget", Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}, After: true, CostHeader: key}},
		Store:   local(t, floodgate.NewManualClock(int64(time.Hour))),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(l.UnaryServerInterceptor()), grpc.StreamInterceptor(l.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, spender{way: way})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

// TestAfterCost: Envoy AI Gateway's pattern through the interceptors, a
// budget of 1,000 an hour checked at each call, each costing 600 when it
// ends, reported three ways, on unary calls and on server streams: the
// first two calls proceed, the second's cost leaves the client owing
// 200, and the third is refused. The cost's metadata never reaches the
// client; the handler's other metadata does.
func TestAfterCost(t *testing.T) {
	ctx := context.Background()
	for _, way := range []string{"report", "trailer", "header"} {
		t.Run(way+"/unary", func(t *testing.T) {
			c := spendServer(t, way)
			var codesSeen []codes.Code
			for range 3 {
				var header, trailer metadata.MD
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
				codesSeen = append(codesSeen, status.Code(err))
				if len(header["x-cost"])+len(trailer["x-cost"]) > 0 {
					t.Errorf("the cost reached the client: header %v, trailer %v", header, trailer)
				}
				if err == nil && way != "report" && len(header["x-other"])+len(trailer["x-other"]) != 1 {
					t.Errorf("the handler's other metadata was lost: header %v, trailer %v", header, trailer)
				}
			}
			if want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}; !equalCodes(codesSeen, want) {
				t.Errorf("calls: %v, want %v", codesSeen, want)
			}
		})
		t.Run(way+"/stream", func(t *testing.T) {
			c := spendServer(t, way)
			var codesSeen []codes.Code
			for range 3 {
				st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for {
					if _, err = st.Recv(); err != nil {
						break
					}
					n++
				}
				if errors.Is(err, io.EOF) {
					err = nil
					if n != 3 {
						t.Errorf("%d messages, want 3", n)
					}
				}
				codesSeen = append(codesSeen, status.Code(err))
				header, _ := st.Header()
				trailer := st.Trailer()
				if len(header["x-cost"])+len(trailer["x-cost"]) > 0 {
					t.Errorf("the cost reached the client: header %v, trailer %v", header, trailer)
				}
			}
			if want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}; !equalCodes(codesSeen, want) {
				t.Errorf("streams: %v, want %v", codesSeen, want)
			}
		})
	}
}

func equalCodes(a, b []codes.Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAfterConfig: a CostHeader or an Estimate without After, a CostHeader
// that is not a plain metadata key (uppercase, gRPC's own, binary), an
// Estimate past the rule's capacity, and an After policy on a Store that
// cannot settle are New's errors; Report outside such a call counts
// nothing.
func TestAfterConfig(t *testing.T) {
	rule := floodgate.Rule{Limit: 10, Period: time.Minute}
	for name, p := range map[string]Policy{
		"key without After":      {Name: "a", Rule: rule, CostHeader: "x-cost"},
		"estimate without After": {Name: "a", Rule: rule, Estimate: 1},
		"estimate past capacity": {Name: "a", Rule: rule, After: true, Estimate: 11},
		"uppercase":              {Name: "a", Rule: rule, After: true, CostHeader: "X-Cost"},
		"grpc's own":             {Name: "a", Rule: rule, After: true, CostHeader: "grpc-status"},
		"binary":                 {Name: "a", Rule: rule, After: true, CostHeader: "cost-bin"},
	} {
		if _, err := New(Config{Default: []Policy{p}}); err == nil {
			t.Errorf("%s: New took it", name)
		}
	}
	ls := floodgate.NewLocalStore(floodgate.LocalStoreConfig{})
	defer ls.Close()
	_, err := New(Config{Default: []Policy{{Name: "a", Rule: rule, After: true}}, Store: plainStore{ls}})
	if err == nil || !strings.Contains(err.Error(), "Settler") {
		t.Errorf("an After policy on a Store that cannot settle: %v", err)
	}
	if Report(context.Background(), 5) {
		t.Error("Report outside a call with After policies said it counted")
	}
}

// plainStore is a Store with no Settler's methods.
type plainStore struct{ floodgate.Store }
