package grpclimit

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// requests is the interceptors' call counts, by route, policy and result.
func requests(l *Limiter) map[string]int64 {
	m := map[string]int64{}
	for _, s := range l.AppendCounts(nil) {
		if s.Metric == counts.Requests && s.Value != 0 {
			m[s.Route+"|"+s.Policy+"|"+s.Label] = s.Value
		}
	}
	return m
}

func equal(t *testing.T, got, want map[string]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("counts %v, want %v", got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

func calls(t *testing.T, c testpb.TestServiceClient, ctx context.Context, n int) (ok int) {
	t.Helper()
	for range n {
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err == nil {
			ok++
		} else if status.Code(err).String() != "ResourceExhausted" {
			t.Fatalf("call failed: %v", err)
		}
	}
	return ok
}

// TestShadowAndCounts: on a real server, a shadow policy refuses nothing
// and counts exactly what enforcement refuses; an exempt call is neither
// charged nor refused, and counted; counts carry no client address.
func TestShadowAndCounts(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	methods := map[string][]Policy{unary: perHour("u", 3)}
	enf, ce := serve(t, Config{Store: local(t, clock), Methods: methods, Default: perHour("d", 1)})
	sh, cs := serve(t, Config{Store: local(t, clock), Methods: methods, Default: perHour("d", 1), Shadow: true,
		Exempt: func(_ context.Context, m string) bool { return m == empty }})
	ctx := context.Background()
	if got := calls(t, ce, ctx, 10); got != 3 {
		t.Fatalf("enforced: %d of 10 served, want 3", got)
	}
	if got := calls(t, cs, ctx, 10); got != 10 {
		t.Fatalf("shadow: %d of 10 served, want all", got)
	}
	for range 4 {
		if _, err := cs.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	equal(t, requests(enf), map[string]int64{unary + "||allowed": 3, unary + "|u|denied": 7})
	equal(t, requests(sh), map[string]int64{unary + "||allowed": 3, unary + "|u|shadow_denied": 7, "default||exempt": 4})
	for _, s := range sh.AppendCounts(nil) {
		if s.Route != unary && s.Route != defaultRoute {
			t.Fatalf("unexpected route label in %+v", s)
		}
	}
}

// TestTiersAndSetMethods: a tier chosen from what the server knows gets
// its entry's policies, an unknown one the Methods entry's; SetMethods
// keeps a kept policy's clients and refuses what New refuses.
func TestTiersAndSetMethods(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	issued := map[string]string{"tok-gold": "gold"}
	tierOf := func(ctx context.Context, _, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("token"); len(v) == 1 {
			return issued[v[0]]
		}
		return ""
	}
	tiers := map[string]map[string][]Policy{"gold": {unary: perHour("u", 4)}}
	l, c := serve(t, Config{Store: local(t, clock), Methods: map[string][]Policy{unary: perHour("u", 1)}, Tiers: tiers, Tier: tierOf})
	gold := metadata.AppendToOutgoingContext(context.Background(), "token", "tok-gold")
	forged := metadata.AppendToOutgoingContext(context.Background(), "token", "gold")
	if got := calls(t, c, gold, 6); got != 4 {
		t.Errorf("gold: %d of 6, want 4", got)
	}
	if got := calls(t, c, forged, 3) + calls(t, c, context.Background(), 3); got != 1 {
		t.Errorf("untiered calls: %d of 6, want 1", got)
	}
	equal(t, requests(l), map[string]int64{unary + "||allowed": 5, unary + "|gold/u|denied": 2, unary + "|u|denied": 5})

	for _, bad := range []struct {
		methods map[string][]Policy
		tiers   map[string]map[string][]Policy
	}{
		{map[string][]Policy{unary: {{Name: "u", Rule: floodgate.Rule{Limit: 1, Period: time.Hour}, Algorithm: floodgate.SlidingLog}}}, nil}, // a kept policy's new algorithm
		{map[string][]Policy{"nope": perHour("u", 1)}, nil},
		{map[string][]Policy{unary: perHour("u", 1)}, map[string]map[string][]Policy{"gold": {empty: perHour("e", 1)}}},
	} {
		if err := l.SetMethods(bad.methods, bad.tiers, nil); err == nil {
			t.Errorf("SetMethods(%v, %v) succeeded", bad.methods, bad.tiers)
		}
	}
	// Keep u with twice its limit (the untiered client, spent, holds
	// nothing after the change), drop the gold tier, and limit EmptyCall.
	if err := l.SetMethods(map[string][]Policy{unary: perHour("u", 2), empty: perHour("e", 1)}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := calls(t, c, gold, 2); got != 0 {
		t.Errorf("after the tier was dropped, gold got %d calls through the spent route policy", got)
	}
	if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); status.Code(err).String() != "ResourceExhausted" {
		t.Fatalf("the new entry does not limit: %v", err)
	}
	l.Close()
	if err := l.SetMethods(nil, nil, nil); err == nil {
		t.Error("SetMethods after Close succeeded")
	}
}

// TestDefaultTiers: Tiers[tier][""] are the Default's policies for that
// tier, on a real server; without a Default the entry is refused.
func TestDefaultTiers(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	tierOf := func(ctx context.Context, _, _ string) string {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("gold")) == 1 {
			return "gold" // the test's stand-in for an authenticated tier
		}
		return ""
	}
	cfg := Config{Store: local(t, clock), Default: perHour("d", 1), Tier: tierOf,
		Tiers: map[string]map[string][]Policy{"gold": {"": perHour("d", 3)}}}
	l, c := serve(t, cfg)
	gold := metadata.AppendToOutgoingContext(context.Background(), "gold", "1")
	if got := calls(t, c, gold, 5); got != 3 {
		t.Errorf("gold on the Default: %d of 5, want 3", got)
	}
	if got := calls(t, c, context.Background(), 3); got != 1 {
		t.Errorf("untiered on the Default: %d of 3, want 1", got)
	}
	equal(t, requests(l), map[string]int64{defaultRoute + "||allowed": 4, defaultRoute + "|gold/d|denied": 2, defaultRoute + "|d|denied": 2})
	if err := l.SetMethods(nil, map[string]map[string][]Policy{"gold": {"": perHour("d", 3)}}, nil); err == nil {
		t.Error("SetMethods took a Default tier with no Default")
	}
	if _, err := New(Config{Tiers: cfg.Tiers}); err == nil {
		t.Error("New took a Default tier with no Default")
	}
}
