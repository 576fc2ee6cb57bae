package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// testService answers unary calls, as any service would.
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

// The interceptors on a gRPC server: the third call of a client within
// the hour is refused with ResourceExhausted and a RetryInfo detail that
// says when the next one can pass.
func ExampleNew() {
	lim, err := grpclimit.New(grpclimit.Config{
		Methods: map[string][]grpclimit.Policy{
			"/grpc.testing.TestService/UnaryCall": {{Name: "unary", Rule: floodgate.Rule{Limit: 2, Period: time.Hour}}},
		},
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.StreamInterceptor(lim.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, testService{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	for range 3 {
		_, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		st := status.Convert(err)
		fmt.Print(st.Code())
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Print(", retry in ", info.RetryDelay.AsDuration().Round(time.Minute))
			}
		}
		fmt.Println()
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted, retry in 30m0s
}

// from is the context of a call from the client at ip, as a server sees
// it.
func from(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 4711}})
}

// answer is how a call fares: "OK", or the code it is refused with.
func answer(lim *grpclimit.Limiter, ctx context.Context, method string) string {
	return status.Code(lim.Check(ctx, method)).String()
}

// A service-wide entry limits every method of the service that has no
// entry of its own, with one allowance per client for all of them; a
// method's own entry limits it apart, and a method that nothing matches
// (with no Default) is not limited.
func ExampleConfig_methods() {
	lim, err := grpclimit.New(grpclimit.Config{Methods: map[string][]grpclimit.Policy{
		"/shop.Catalog/":       {{Name: "catalog", Rule: floodgate.Rule{Limit: 2, Period: time.Minute}}},
		"/shop.Catalog/Search": {{Name: "search", Rule: floodgate.Rule{Limit: 1, Period: time.Minute}}},
	}})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	alice, bob := from("192.0.2.1"), from("192.0.2.2")
	fmt.Println("alice, the service:", answer(lim, alice, "/shop.Catalog/Get"), answer(lim, alice, "/shop.Catalog/List"),
		answer(lim, alice, "/shop.Catalog/Get"))
	fmt.Println("alice, Search:", answer(lim, alice, "/shop.Catalog/Search"), answer(lim, alice, "/shop.Catalog/Search"))
	fmt.Println("bob, the service:", answer(lim, bob, "/shop.Catalog/Get"))
	fmt.Println("alice, another service:", answer(lim, alice, "/shop.Orders/Create"))
	// Output:
	// alice, the service: OK OK ResourceExhausted
	// alice, Search: OK ResourceExhausted
	// bob, the service: OK
	// alice, another service: OK
}

// userKey is the context key under which the server's authentication puts
// the verified user.
type userKey struct{}

// Keyed by the authenticated user rather than the address, and tiered by
// the user's plan: a gold user's calls are limited by the tier's policies,
// every other user's by the entry's own. Both are decided from what the
// server verified, never from metadata the client writes.
func ExampleConfig_tiers() {
	plans := map[string]string{"u-gold": "gold"}
	lim, err := grpclimit.New(grpclimit.Config{
		Methods: map[string][]grpclimit.Policy{
			"/shop.Catalog/": {{Name: "catalog", Rule: floodgate.Rule{Limit: 1, Period: time.Minute}}},
		},
		Tiers: map[string]map[string][]grpclimit.Policy{
			"gold": {"/shop.Catalog/": {{Name: "catalog", Rule: floodgate.Rule{Limit: 3, Period: time.Minute}}}},
		},
		Key: func(ctx context.Context, _, client string) string {
			if user, ok := ctx.Value(userKey{}).(string); ok {
				return user
			}
			return client
		},
		Tier: func(_ context.Context, _, key string) string { return plans[key] },
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	for _, user := range []string{"u-free", "u-gold"} {
		ctx := context.WithValue(from("192.0.2.1"), userKey{}, user) // as the authentication left it
		fmt.Print(user, ":")
		for range 4 {
			fmt.Print(" ", answer(lim, ctx, "/shop.Catalog/Get"))
		}
		fmt.Println()
	}
	// Output:
	// u-free: OK ResourceExhausted ResourceExhausted ResourceExhausted
	// u-gold: OK OK OK ResourceExhausted
}
