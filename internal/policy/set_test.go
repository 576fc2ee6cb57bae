package policy

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"github.com/floodgate-go/floodgate/internal/testmain"
)

// TestMain fails the package's tests if they leave a goroutine behind.
func TestMain(m *testing.M) { testmain.Run(m) }

func valid(s string) bool { return s != "" && len(s) <= 64 }

func perHour(name string, limit int64, shadow bool) Spec {
	return Spec{Name: name, Rule: floodgate.Rule{Limit: limit, Period: time.Hour}, Shadow: shadow}
}

// storeFor is a new LocalStore on clock, closed when t ends.
func storeFor(t *testing.T, clock floodgate.Clock) *floodgate.LocalStore {
	s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: clock})
	t.Cleanup(func() { s.Close() })
	return s
}

// storeOf is the Store of r's policies.
func storeOf(r *Route) floodgate.Store { return r.base.store }

func build(t *testing.T, clock floodgate.Clock, old []*Route, base []Spec, tiers map[string][]Spec) (*Route, *Builder) {
	t.Helper()
	var store floodgate.Store = storeFor(t, clock)
	if len(old) > 0 {
		store = storeOf(old[0])
	}
	b := NewBuilder(store, valid, false, old)
	r, err := b.Route("r", base, tiers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, l := range Closers([]*Route{r}) {
			l.Close()
		}
	})
	return r, b
}

// sample is one series of Route.AppendCounts by its labels.
func samples(r *Route) map[string]int64 {
	m := map[string]int64{}
	for _, s := range r.AppendCounts(nil) {
		m[countinfo.Of(s.Metric).Prometheus+"|"+s.Route+"|"+s.Policy+"|"+s.Label] = s.Value
	}
	return m
}

// TestDecideMixedShadow walks a shadow policy before an enforced one
// through every case: both admit; only the shadow refuses (served, and
// charged to the enforced policy alone); both refuse (refused under the
// enforced policy).
func TestDecideMixedShadow(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	r, _ := build(t, clock, nil, []Spec{perHour("burst", 2, true), perHour("hour", 3, false)}, nil)
	s := r.For("")
	if got := s.Shown; len(got) != 1 || got[0] != 1 {
		t.Fatalf("Shown = %v, want [1]: only the enforced policy", got)
	}
	type step struct {
		serve      bool
		hourLeft   int64
		shadowSeen bool
	}
	for i, want := range []step{{true, 2, false}, {true, 1, false}, {true, 0, true}, {false, 0, true}} {
		var each [2]floodgate.Decision
		serve := s.Decide(context.Background(), "k", 1, each[:], new(floodgate.Decision))
		if serve != want.serve || each[1].Remaining != want.hourLeft {
			t.Fatalf("request %d: serve %v, hour's Remaining %d; want %v, %d", i, serve, each[1].Remaining, want.serve, want.hourLeft)
		}
	}
	got := samples(r)
	for k, v := range map[string]int64{
		"floodgate_requests_total|r||allowed":            2,
		"floodgate_requests_total|r||exempt":             0,
		"floodgate_requests_total|r|burst|shadow_denied": 1,
		"floodgate_requests_total|r|burst|denied":        0,
		"floodgate_requests_total|r|hour|denied":         1,
		"floodgate_requests_total|r|hour|shadow_denied":  0,
		"floodgate_keys|r|burst|":                        1,
		"floodgate_keys|r|hour|":                         1,
		"floodgate_evictions_total|r|hour|idle":          0,
		"floodgate_keys_max|r|hour|":                     1 << 20, /* 64 MiB of 64-byte keys */
		"floodgate_evictions_total|r|burst|bound":        0,
		"floodgate_evictions_total|r|burst|fresh":        0,
		"floodgate_evictions_total|r|burst|idle":         0,
		"floodgate_keys_max|r|burst|":                    1 << 20,
		"floodgate_evictions_total|r|hour|bound":         0,
		"floodgate_evictions_total|r|hour|fresh":         0,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %d (present %v), want %d", k, g, ok, v)
		}
	}
	if len(got) != 16 { // every series above, and no other
		t.Errorf("%d series, want 16: %v", len(got), got)
	}
}

// TestAllShadow: with every policy a shadow, nothing is refused, and the
// shadow denials are exactly the requests enforcement refuses, request
// for request, because a shadow refusal is charged as enforcement's is:
// not at all.
func TestAllShadow(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	specs := []Spec{perHour("a", 5, false), {Name: "b", Rule: floodgate.Rule{Limit: 3, Period: time.Minute}, Algorithm: floodgate.SlidingLog}}
	enf, _ := build(t, clock, nil, specs, nil)
	shadowSpecs := append([]Spec(nil), specs...)
	for i := range shadowSpecs {
		shadowSpecs[i].Shadow = true
	}
	sh, _ := build(t, clock, nil, shadowSpecs, nil)
	if sh.For("").Shows() {
		t.Fatal("a Set of shadows shows headers")
	}
	shadowed := func() int64 {
		return sh.For("").entries[0].count.Value(entryShadow) + sh.For("").entries[1].count.Value(entryShadow)
	}
	for i := range 200 {
		clock.Advance(7 * time.Second)
		want := enf.For("").Decide(context.Background(), "k", 1, nil, new(floodgate.Decision))
		before := shadowed()
		serve := sh.For("").Decide(context.Background(), "k", 1, nil, new(floodgate.Decision))
		if !serve {
			t.Fatalf("request %d refused in shadow mode", i)
		}
		if counted := shadowed() - before; counted != map[bool]int64{true: 0, false: 1}[want] {
			t.Fatalf("request %d: enforcement served %v, shadow counted %d denials", i, want, counted)
		}
	}
	e, s := samples(enf), samples(sh)
	for _, p := range []string{"a", "b"} {
		if d, sd := e["floodgate_requests_total|r|"+p+"|denied"], s["floodgate_requests_total|r|"+p+"|shadow_denied"]; d != sd || d == 0 {
			t.Errorf("policy %s: enforced denied %d, shadow_denied %d", p, d, sd)
		}
	}
}

// TestTiers: a tier has its own policies and state; an unknown tier, the
// empty one included, is limited by the route's own.
func TestTiers(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	r, _ := build(t, clock, nil, []Spec{perHour("p", 1, false)}, map[string][]Spec{"pro": {perHour("p", 3, false)}})
	admitted := func(tier string, n int) int {
		got := 0
		for range n {
			if ok := r.For(tier).Decide(context.Background(), "k", 1, nil, new(floodgate.Decision)); ok {
				got++
			}
		}
		return got
	}
	if got := admitted("pro", 5); got != 3 {
		t.Errorf("pro admitted %d of 5, want 3", got)
	}
	if got := admitted("", 5) + admitted("free", 5) + admitted("\x00garbage", 5); got != 1 {
		t.Errorf("the route's own policy admitted %d across unknown tiers, want 1: they share it", got)
	}
	got := samples(r)
	if got["floodgate_requests_total|r|pro/p|denied"] != 2 || got["floodgate_requests_total|r|p|denied"] != 14 {
		t.Errorf("denials by tier: %v", got)
	}
	b := NewBuilder(storeFor(t, clock), valid, false, nil)
	defer b.Abort()
	if _, err := b.Route("r", []Spec{perHour("p", 1, false)}, map[string][]Spec{"": {perHour("p", 1, false)}}); err == nil {
		t.Error("an empty tier name was accepted")
	}
	if _, err := b.Route("r", []Spec{perHour("p", 1, false)}, map[string][]Spec{"pro": nil}); err == nil {
		t.Error("a tier without policies was accepted")
	}
}

// TestReplaceKeepsState: a replacement keeps a policy's Limiter (and its
// clients' state) and its route's counts when the names stay; it refuses
// a new algorithm for a kept name, and a bad rule, leaving the old
// Limiter as it was.
func TestReplaceKeepsState(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	r, _ := build(t, clock, nil, []Spec{perHour("p", 2, false), perHour("q", 2, false)}, nil)
	s := r.For("")
	s.Decide(context.Background(), "k", 1, nil, new(floodgate.Decision))
	s.Decide(context.Background(), "k", 1, nil, new(floodgate.Decision))
	s.Decide(context.Background(), "k", 1, nil, new(floodgate.Decision)) // denied by p
	old := s.entries[0].SP

	bad := NewBuilder(storeOf(r), valid, false, []*Route{r})
	if _, err := bad.Route("r", []Spec{{Name: "p", Rule: floodgate.Rule{Limit: 2, Period: time.Hour}, Algorithm: floodgate.FixedWindow}}, nil); err == nil {
		t.Error("a kept policy's algorithm changed without an error")
	}
	if _, err := bad.Route("r", []Spec{{Name: "p", Rule: floodgate.Rule{Limit: 2, Period: 0}}}, nil); err == nil {
		t.Error("a kept policy took a zero period")
	}
	if _, err := bad.Route("r2", []Spec{{Name: "p", Rule: floodgate.Rule{Limit: 0, Period: time.Hour}}}, nil); err == nil {
		t.Error("a zero limit was accepted")
	}
	bad.Abort()

	b := NewBuilder(storeOf(r), valid, false, []*Route{r})
	r2, err := b.Route("r", []Spec{perHour("p", 2, true)}, nil) // q dropped; p now a shadow
	if err != nil {
		t.Fatal(err)
	}
	retired, err := b.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if len(retired) != 1 || retired[0] != r.For("").entries[1].SP {
		t.Fatalf("retired %v, want q's policy alone", retired)
	}
	retired[0].Close()
	s2 := r2.For("")
	if s2.entries[0].SP != old {
		t.Fatal("p's policy was not kept")
	}
	if serve := s2.Decide(context.Background(), "k", 1, nil, new(floodgate.Decision)); !serve {
		t.Fatal("p as a shadow refused")
	}
	got := samples(r2)
	if got["floodgate_requests_total|r||allowed"] != 2 || got["floodgate_requests_total|r|p|denied"] != 1 || got["floodgate_requests_total|r|p|shadow_denied"] != 1 {
		t.Errorf("counts after the replacement: %v", got)
	}
	if _, ok := got["floodgate_keys|r|q|"]; ok {
		t.Error("a dropped policy is still reported")
	}
}

// TestDecideAllocs: deciding an existing key allocates nothing, through
// the enforced-only second charge of a shadow refusal too.
func TestDecideAllocs(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	r, _ := build(t, clock, nil, []Spec{perHour("burst", 1, true), perHour("hour", 1<<40, false)}, nil)
	s := r.For("")
	var each [2]floodgate.Decision
	s.Decide(context.Background(), "k", 1, each[:], new(floodgate.Decision))
	if n := testing.AllocsPerRun(1000, func() { s.Decide(context.Background(), "k", 1, each[:], new(floodgate.Decision)) }); n != 0 {
		t.Errorf("Decide allocates %v times a request", n)
	}
	var dst []counts.Sample
	dst = r.AppendCounts(dst[:0])
	if n := testing.AllocsPerRun(100, func() { dst = r.AppendCounts(dst[:0]) }); n > 2 {
		t.Errorf("AppendCounts into a buffer allocates %v times", n)
	}
}
