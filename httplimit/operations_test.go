package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// requests is the middleware's request counts, by route, policy and
// result.
func requests(l *Limiter) map[string]int64 {
	m := map[string]int64{}
	for _, s := range l.AppendCounts(nil) {
		if s.Metric == counts.Requests {
			m[s.Route+"|"+s.Policy+"|"+s.Label] = s.Value
		}
	}
	return m
}

func wantCounts(t *testing.T, got map[string]int64, want map[string]int64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	var sum, wantSum int64
	for _, v := range got {
		sum += v
	}
	for _, v := range want {
		wantSum += v
	}
	if sum != wantSum {
		t.Errorf("counts %v add up to %d, want %d", got, sum, wantSum)
	}
}

// TestCountsKnownSequence: over a real server, each request is counted
// once under its route (the pattern, or "default"), a refusal under the
// policy that refused it, an exempt request as exempt; no label is ever
// a client's key.
func TestCountsKnownSequence(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	l, url := serve(t, Config{Store: local(t, clock),
		Routes: []Route{{Pattern: "GET /a", Policies: []Policy{
			{Name: "hour", Rule: floodgate.Rule{Limit: 3, Period: time.Hour}},
			{Name: "sec", Rule: floodgate.Rule{Limit: 2, Period: time.Second}},
		}}},
		Default: perHour("other", 1),
		Exempt:  func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})
	for range 3 {
		do(t, "GET", url+"/a") // 2 allowed, then refused by sec
	}
	clock.Advance(time.Second)
	do(t, "GET", url+"/a") // allowed: hour's third
	do(t, "GET", url+"/a") // refused by hour
	do(t, "GET", url+"/x") // default: allowed
	do(t, "GET", url+"/x") // default: refused
	for range 5 {
		if a := do(t, "GET", url+"/healthz"); a.status != 200 || a.header.Get("RateLimit") != "" {
			t.Fatalf("exempt request: %d, RateLimit %q", a.status, a.header.Get("RateLimit"))
		}
	}
	wantCounts(t, requests(l), map[string]int64{
		"GET /a||allowed":           3,
		"GET /a|sec|denied":         1,
		"GET /a|hour|denied":        1,
		"default||allowed":          1,
		"default|other|denied":      1,
		"default||exempt":           5,
		"GET /a||exempt":            0,
		"GET /a|hour|shadow_denied": 0,
	})
	for _, s := range l.AppendCounts(nil) {
		for _, v := range []string{s.Route, s.Policy, s.Label} {
			if strings.Contains(v, "127.0.0.1") {
				t.Fatalf("a sample carries a client's address: %+v", s)
			}
		}
	}
}

// TestShadowFlood: in shadow mode a flood passes whole, without RateLimit
// headers, and the shadow denials equal what enforcement refuses, request
// for request.
func TestShadowFlood(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	routes := []Route{{Pattern: "/api/", Policies: []Policy{
		{Name: "burst", Rule: floodgate.Rule{Limit: 5, Period: time.Second}},
		{Name: "log", Rule: floodgate.Rule{Limit: 20, Period: time.Minute}, Algorithm: floodgate.SlidingLog},
	}}}
	enf, enfURL := serve(t, Config{Store: local(t, clock), Routes: routes})
	sh, shURL := serve(t, Config{Store: local(t, clock), Routes: routes, Shadow: true})
	refused := 0
	for i := range 120 {
		if i%10 == 0 {
			clock.Advance(700 * time.Millisecond)
		}
		e := do(t, "GET", enfURL+"/api/x")
		before := requests(sh)
		s := do(t, "GET", shURL+"/api/x")
		if s.status != 200 || s.body != "ok" {
			t.Fatalf("request %d refused in shadow mode: %d", i, s.status)
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if s.header.Get(h) != "" {
				t.Fatalf("request %d: shadow mode sent %s", i, h)
			}
		}
		after := requests(sh)
		shadowed := after["/api/|burst|shadow_denied"] + after["/api/|log|shadow_denied"] -
			before["/api/|burst|shadow_denied"] - before["/api/|log|shadow_denied"]
		if (e.status == http.StatusTooManyRequests) != (shadowed == 1) || shadowed > 1 {
			t.Fatalf("request %d: enforcement answered %d, shadow counted %d denials", i, e.status, shadowed)
		}
		if e.status == http.StatusTooManyRequests {
			refused++
		}
	}
	ec, sc := requests(enf), requests(sh)
	for _, p := range []string{"burst", "log"} {
		if ec["/api/|"+p+"|denied"] != sc["/api/|"+p+"|shadow_denied"] {
			t.Errorf("policy %s: enforcement denied %d, shadow counted %d", p, ec["/api/|"+p+"|denied"], sc["/api/|"+p+"|shadow_denied"])
		}
	}
	if refused < 60 || ec["/api/||allowed"] != sc["/api/||allowed"] {
		t.Errorf("refused %d of 120; allowed %d enforced, %d shadowed", refused, ec["/api/||allowed"], sc["/api/||allowed"])
	}
}

// TestShadowPolicy: a shadow policy beside an enforced one is left out of
// the headers (unless ShadowHeaders), and a request only it refuses is
// served and charged to the enforced policy.
func TestShadowPolicy(t *testing.T) {
	for _, show := range []bool{false, true} {
		clock := floodgate.NewManualClock(0)
		l, url := serve(t, Config{Store: local(t, clock), ShadowHeaders: show, LegacyHeaders: true, Routes: []Route{{Pattern: "/", Policies: []Policy{
			{Name: "new", Rule: floodgate.Rule{Limit: 2, Period: time.Hour}, Shadow: true},
			{Name: "old", Rule: floodgate.Rule{Limit: 3, Period: time.Hour}},
		}}}})
		wantPolicy := `"old";q=3;w=3600`
		if show {
			wantPolicy = `"new";q=2;w=3600, ` + wantPolicy
		}
		for i, want := range []struct {
			status    int
			rateLimit string
			remaining string
		}{
			{200, `"old";r=2;t=1200`, "2"},
			{200, `"old";r=1;t=2400`, "1"},
			{200, `"old";r=0;t=3600`, "0"}, // new would refuse: served, old charged
			{429, `"old";r=0;t=3600`, "0"}, // old refuses
		} {
			a := do(t, "GET", url+"/")
			if show {
				want.rateLimit = map[int]string{0: `"new";r=1;t=1800`, 1: `"new";r=0;t=3600`, 2: `"new";r=0;t=3600`, 3: `"new";r=0;t=3600`}[i] + ", " + want.rateLimit
				want.remaining = []string{"1", "0", "0", "0"}[i] // the most restrictive shown policy's
			}
			if a.status != want.status || a.header.Get("RateLimit-Policy") != wantPolicy || a.header.Get("RateLimit") != want.rateLimit ||
				a.header.Get("X-RateLimit-Remaining") != want.remaining {
				t.Fatalf("show %v, request %d: %d %q %q remaining %q; want %d %q %q %q", show, i, a.status,
					a.header.Get("RateLimit-Policy"), a.header.Get("RateLimit"), a.header.Get("X-RateLimit-Remaining"),
					want.status, wantPolicy, want.rateLimit, want.remaining)
			}
			if (a.header.Get("Retry-After") != "") != (want.status == 429) {
				t.Fatalf("request %d: Retry-After %q", i, a.header.Get("Retry-After"))
			}
		}
		wantCounts(t, requests(l), map[string]int64{"/||allowed": 2, "/|new|shadow_denied": 1, "/|old|denied": 1})
	}
}

// TestTiersAndExemption: a tier chosen from what the server knows (here,
// an API key it has issued) gets its own policies; a tier the function
// does not know falls back to the route's own, so a client that could
// name any tier still gets no more than the route allows; an exempt
// request is neither charged nor given headers.
func TestTiersAndExemption(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	issued := map[string]string{"key-pro": "pro"}
	l, url := serve(t, Config{Store: local(t, clock),
		Routes: []Route{{Pattern: "/", Policies: perHour("p", 1), Tiers: map[string][]Policy{"pro": perHour("p", 3)}}},
		Key:    func(r *http.Request, client string) string { return r.Header.Get("Api-Key") + "@" + client },
		Tier: func(r *http.Request, client string) string {
			return issued[r.Header.Get("Api-Key")] // "" for any key the server has not issued
		},
		Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})
	served := func(key string, n int) int {
		got := 0
		for range n {
			if do(t, "GET", url+"/", "Api-Key", key).status == 200 {
				got++
			}
		}
		return got
	}
	if got := served("key-pro", 5); got != 3 {
		t.Errorf("pro served %d of 5, want 3", got)
	}
	if got := served("key-free", 5); got != 1 {
		t.Errorf("free served %d of 5, want 1", got)
	}
	if got := served("pro", 5); got != 1 { // names the tier, not a key
		t.Errorf("a client naming the tier served %d of 5, want 1", got)
	}
	for range 3 {
		if a := do(t, "GET", url+"/healthz", "Api-Key", "key-free"); a.status != 200 || a.header.Get("RateLimit-Policy") != "" {
			t.Fatalf("exempt: %d, RateLimit-Policy %q", a.status, a.header.Get("RateLimit-Policy"))
		}
	}
	wantCounts(t, requests(l), map[string]int64{"/||allowed": 5, "/|pro/p|denied": 2, "/|p|denied": 8, "/||exempt": 3})
	if _, err := New(Config{Routes: []Route{{Pattern: "/", Policies: perHour("p", 1), Tiers: map[string][]Policy{"bad tier": perHour("p", 3)}}}}); err == nil {
		t.Error("a tier name with a space was accepted")
	}
}

// TestSetRoutes replaces the routes while serving: a policy that keeps
// its route and name keeps its clients' state through a new rule (no
// client gets a fresh allowance) and a shadow switch; an algorithm change
// under a kept name and every bad replacement are refused and change
// nothing; a new route limits at
// once; a dropped route no longer limits, and its traffic falls to the
// new Default.
func TestSetRoutes(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	l, url := serve(t, Config{Store: local(t, clock), Routes: []Route{
		{Pattern: "/a", Policies: perHour("p", 2)},
		{Pattern: "/b", Policies: perHour("p", 1)},
	}})
	do(t, "GET", url+"/a")
	do(t, "GET", url+"/a")
	do(t, "GET", url+"/b")
	if do(t, "GET", url+"/a").status != 429 || do(t, "GET", url+"/b").status != 429 {
		t.Fatal("the first rules were not enforced")
	}
	for _, bad := range [][]Route{
		{{Pattern: "/a", Policies: []Policy{{Name: "p", Rule: floodgate.Rule{Limit: 2, Period: time.Hour}, Algorithm: floodgate.FixedWindow}}}},
		{{Pattern: "/a", Policies: perHour("q", 0)}},
		{{Pattern: "/a", Policies: perHour("q", 6)}, {Pattern: "/a", Policies: perHour("r", 6)}},
		{{Pattern: "/a", Policies: perHour("q", 6), Tiers: map[string][]Policy{"t": nil}}},
	} {
		if err := l.SetRoutes(bad, nil); err == nil {
			t.Errorf("SetRoutes(%+v) succeeded", bad)
		}
	}
	if do(t, "GET", url+"/b").status != 429 || do(t, "GET", url+"/a").status != 429 {
		t.Fatal("a failed SetRoutes changed the routes")
	}
	// /a triples its limit: its client held nothing, and holds nothing
	// after the change (no free burst), then refills at 6 an hour, one
	// every 10 minutes.
	if err := l.SetRoutes([]Route{{Pattern: "/a", Policies: perHour("p", 6)}, {Pattern: "/b", Policies: perHour("p", 1)}}, nil); err != nil {
		t.Fatal(err)
	}
	if a := do(t, "GET", url+"/a"); a.status != 429 || a.header.Get("RateLimit-Policy") != `"p";q=6;w=3600` {
		t.Fatalf("after raising /a's limit: %d %q, want 429 under the new rule", a.status, a.header.Get("RateLimit-Policy"))
	}
	clock.Advance(10 * time.Minute)
	if do(t, "GET", url+"/a").status != 200 || do(t, "GET", url+"/a").status != 429 {
		t.Fatal("the raised limit does not refill at its own rate from what the client held")
	}
	shadow := []Policy{{Name: "p", Rule: floodgate.Rule{Limit: 6, Period: time.Hour}, Shadow: true}}
	if err := l.SetRoutes([]Route{{Pattern: "/a", Policies: shadow}, {Pattern: "/c", Policies: perHour("c", 1)}}, perHour("d", 1)); err != nil {
		t.Fatal(err)
	}
	if a := do(t, "GET", url+"/a"); a.status != 200 || a.header.Get("RateLimit") != "" {
		t.Fatalf("/a as a shadow: %d, RateLimit %q", a.status, a.header.Get("RateLimit"))
	}
	if do(t, "GET", url+"/c").status != 200 || do(t, "GET", url+"/c").status != 429 {
		t.Fatal("the new route /c does not limit")
	}
	if do(t, "GET", url+"/b").status != 200 || do(t, "GET", url+"/b").status != 429 {
		t.Fatal("/b, dropped, is not limited by the new Default alone")
	}
	wantCounts(t, requests(l), map[string]int64{
		"/a||allowed": 3, "/a|p|denied": 4, "/a|p|shadow_denied": 1, // kept across the replacements: p's client was still spent
		"/c||allowed": 1, "/c|c|denied": 1, "default||allowed": 1, "default|d|denied": 1,
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.SetRoutes(nil, nil); err == nil {
		t.Error("SetRoutes after Close succeeded")
	}
}

// TestTwoRoutesCountedAndShadowed: a path whose escapes route it apart
// is counted under both routes it is charged under; with the first
// route a shadow, the headers carry only the enforced route's policy,
// and a refusal by the second still refuses.
func TestTwoRoutesCountedAndShadowed(t *testing.T) {
	l, err := New(Config{Routes: []Route{
		{Pattern: "/api/", Policies: []Policy{{Name: "api", Rule: floodgate.Rule{Limit: 1, Period: time.Hour}, Shadow: true}}},
		{Pattern: "/", Policies: perHour("rest", 2)},
	}, Store: local(t, floodgate.NewManualClock(0))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var codes []int
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/api%2Fx", nil))
		if got := w.Header().Get("RateLimit-Policy"); got != `"rest";q=2;w=3600` {
			t.Fatalf("RateLimit-Policy %q: want the enforced route's alone", got)
		}
		codes = append(codes, w.Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("answers %v, want 200 200 429", codes)
	}
	wantCounts(t, requests(l), map[string]int64{
		"/api/||allowed": 1, "/api/|api|shadow_denied": 2,
		"/||allowed": 2, "/|rest|denied": 1,
	})
}

// TestUncounted: a middleware built through testhook.Uncounted decides as
// any other and counts nothing, in every case Decide counts (allowed,
// shadow_denied, denied) and after SetRoutes, while one built beside it in
// the same process counts each request: the switch is the middleware's,
// not the process's.
func TestUncounted(t *testing.T) {
	routes := []Route{{Pattern: "/r", Policies: []Policy{
		{Name: "s", Rule: floodgate.Rule{Limit: 1, Period: time.Hour}, Shadow: true},
		{Name: "e", Rule: floodgate.Rule{Limit: 2, Period: time.Hour}},
	}}}
	cfg := Config{Routes: routes}
	uncounted, err := New(testhook.Uncounted(cfg).(Config))
	if err != nil {
		t.Fatal(err)
	}
	defer uncounted.Close()
	counted, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer counted.Close()
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	hu, hc := uncounted.Handler(ok), counted.Handler(ok)
	// Allowed; refused by the shadow alone (served); refused by e.
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		for name, h := range map[string]http.Handler{"uncounted": hu, "counted": hc} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/r", nil))
			if w.Code != want {
				t.Fatalf("%s: request %d: %d, want %d", name, i, w.Code, want)
			}
		}
	}
	for _, l := range []*Limiter{uncounted, counted} {
		if err := l.SetRoutes(routes, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []http.Handler{hu, hc} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/r", nil)) // denied by e
	}
	wantCounts(t, requests(uncounted), map[string]int64{})
	wantCounts(t, requests(counted), map[string]int64{
		"/r||allowed":        1,
		"/r|s|shadow_denied": 1,
		"/r|e|denied":        2,
	})
}
