package httplimit

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// local returns a LocalStore on clock, closed when the test ends (after
// what the test made with it): the Store that New makes when Config.Store
// is nil, on the test's clock.
func local(t testing.TB, clock floodgate.Clock) *floodgate.LocalStore {
	s := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: clock})
	t.Cleanup(func() { s.Close() })
	return s
}

// serve runs the middleware over a handler that answers "ok" on a real
// loopback server, and returns its URL.
func serve(t *testing.T, cfg Config) (*Limiter, string) {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	srv := httptest.NewServer(l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return l, srv.URL
}

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(body)}
}

func perHour(name string, limit int64) []Policy {
	return []Policy{{Name: name, Rule: floodgate.Rule{Limit: limit, Period: time.Hour}}}
}

// TestEndpointsAndHeaders: each route has its own allowance per client;
// every limited answer carries RateLimit-Policy and RateLimit, and a
// refusal is a 429 with Retry-After in whole seconds.
func TestEndpointsAndHeaders(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	_, url := serve(t, Config{Store: local(t, clock), Routes: []Route{
		{Pattern: "GET /a", Policies: perHour("a", 3)},
		{Pattern: "GET /b/{id}", Policies: perHour("b", 2)},
	}})
	for i := range 3 {
		a := do(t, "GET", url+"/a")
		if a.status != 200 || a.body != "ok" {
			t.Fatalf("request %d: %d %q", i, a.status, a.body)
		}
		if got := a.header.Get("RateLimit-Policy"); got != `"a";q=3;w=3600` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		want := fmt.Sprintf(`"a";r=%d;t=%d`, 2-i, (i+1)*1200)
		if got := a.header.Get("RateLimit"); got != want {
			t.Fatalf("request %d: RateLimit %q, want %q", i, got, want)
		}
		if a.header.Get("Retry-After") != "" {
			t.Fatal("Retry-After on an admitted request")
		}
	}
	a := do(t, "GET", url+"/a")
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "1200" {
		t.Fatalf("fourth request: %d, Retry-After %q; want 429 and 1200", a.status, a.header.Get("Retry-After"))
	}
	if got := a.header.Get("RateLimit"); got != `"a";r=0;t=3600` {
		t.Fatalf("refusal's RateLimit %q", got)
	}
	if strings.Contains(a.body, "floodgate") || strings.TrimSpace(a.body) != "Too Many Requests" {
		t.Fatalf("refusal's body %q", a.body)
	}
	// Another endpoint, and a wildcard route is one endpoint for every id.
	for i, path := range []string{"/b/1", "/b/2", "/b/3"} {
		if a := do(t, "GET", url+path); (a.status == 200) != (i < 2) {
			t.Fatalf("%s: %d", path, a.status)
		}
	}
	// Unmatched requests (another path, another method) pass untouched.
	for _, m := range []string{"GET /c", "POST /a"} {
		method, path, _ := strings.Cut(m, " ")
		if a := do(t, method, url+path); a.status != 200 || a.header.Get("RateLimit") != "" {
			t.Fatalf("%s: %d, RateLimit %q", m, a.status, a.header.Get("RateLimit"))
		}
	}
	clock.Advance(20 * time.Minute)
	if a := do(t, "GET", url+"/a"); a.status != 200 {
		t.Fatalf("after the refill: %d", a.status)
	}
}

// TestDefaultAndSeveralPolicies: the default rule limits what no route
// matches; a route with two policies reports both and refuses when either
// does.
func TestDefaultAndSeveralPolicies(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	_, url := serve(t, Config{Store: local(t, clock), Default: perHour("default", 1), Routes: []Route{{
		Pattern: "/api/",
		Policies: []Policy{
			{Name: "burst", Rule: floodgate.Rule{Limit: 2, Period: time.Second}},
			{Name: "hourly", Rule: floodgate.Rule{Limit: 3, Period: time.Hour}, Algorithm: floodgate.SlidingLog},
		},
	}}})
	if a := do(t, "GET", url+"/x"); a.status != 200 || a.header.Get("RateLimit") != `"default";r=0;t=3600` {
		t.Fatalf("default: %d %q", a.status, a.header.Get("RateLimit"))
	}
	if a := do(t, "POST", url+"/y"); a.status != 429 {
		t.Fatalf("default, second: %d", a.status)
	}
	a := do(t, "GET", url+"/api/v1")
	if got := a.header.Get("RateLimit-Policy"); got != `"burst";q=2;w=1, "hourly";q=3;w=3600` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if got := a.header.Get("RateLimit"); !strings.HasPrefix(got, `"burst";r=1;t=1, "hourly";r=2;t=`) {
		t.Fatalf("RateLimit %q", got)
	}
	do(t, "GET", url+"/api/v1")
	if a := do(t, "GET", url+"/api/v1"); a.status != 429 || a.header.Get("Retry-After") != "1" {
		t.Fatalf("burst spent: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
	}
	clock.Advance(time.Second)
	do(t, "GET", url+"/api/v1") // the hourly policy's third
	clock.Advance(time.Second)
	a = do(t, "GET", url+"/api/v1")
	if a.status != 429 || !strings.Contains(a.header.Get("RateLimit"), `"hourly";r=0`) || !strings.Contains(a.header.Get("RateLimit"), `"burst";r=1`) {
		t.Fatalf("hourly spent: %d, RateLimit %q (the burst policy's grant must be given back)", a.status, a.header.Get("RateLimit"))
	}
}

// TestRetryAfterRoundsUp: a wait of under a second is 1, never 0; 1.5s is 2.
func TestRetryAfterRoundsUp(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	_, url := serve(t, Config{Store: local(t, clock), Routes: []Route{
		{Pattern: "/fast", Policies: []Policy{{Name: "fast", Rule: floodgate.Rule{Limit: 10, Period: time.Second}}}},
		{Pattern: "/slow", Policies: []Policy{{Name: "slow", Rule: floodgate.Rule{Limit: 1, Period: 1500 * time.Millisecond}}}},
	}})
	for range 10 {
		do(t, "GET", url+"/fast")
	}
	if a := do(t, "GET", url+"/fast"); a.status != 429 || a.header.Get("Retry-After") != "1" {
		t.Fatalf("fast: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
	}
	do(t, "GET", url+"/slow")
	if a := do(t, "GET", url+"/slow"); a.status != 429 || a.header.Get("Retry-After") != "2" {
		t.Fatalf("slow: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
	}
}

// TestForwardedProxyHeader: ProxyHeader "forwarded" (any case) reads
// RFC 7239's for= from a trusted proxy, and then ignores X-Forwarded-For,
// which a client behind that proxy could set to anything.
func TestForwardedProxyHeader(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	_, url := serve(t, Config{Store: local(t, clock), TrustedProxies: []string{"127.0.0.0/8", "::1/128"}, ProxyHeader: "forwarded",
		Routes: []Route{{Pattern: "/", Policies: perHour("p", 2)}}})
	for _, c := range []string{"203.0.113.1", "203.0.113.2"} {
		for i := range 3 {
			if a := do(t, "GET", url, "Forwarded", "for=198.51.100.99, for="+c); (a.status == 200) != (i < 2) {
				t.Fatalf("client %s, request %d: %d", c, i, a.status)
			}
		}
	}
	for i := range 3 {
		if a := do(t, "GET", url, "Forwarded", "for=203.0.113.1", "X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i)); a.status != 429 {
			t.Fatalf("X-Forwarded-For changed the key under ProxyHeader Forwarded: request %d got %d", i, a.status)
		}
	}
}

// TestProxies: over loopback the peer is 127.0.0.1. Untrusted, the
// client's own X-Forwarded-For changes nothing; trusted, each forwarded
// client has its own allowance, and IPv6 clients share theirs by /64.
func TestProxies(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	_, spoofable := serve(t, Config{Store: local(t, clock), Routes: []Route{{Pattern: "/", Policies: perHour("p", 2)}}})
	passed := 0
	for i := range 5 {
		if do(t, "GET", spoofable, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i)).status == 200 {
			passed++
		}
	}
	if passed != 2 {
		t.Fatalf("an untrusted peer's X-Forwarded-For bought %d requests, want 2", passed)
	}
	l, proxied := serve(t, Config{Store: local(t, clock), TrustedProxies: []string{"127.0.0.0/8", "::1/128"},
		Routes: []Route{{Pattern: "/", Policies: perHour("p", 2)}}})
	for _, c := range []string{"203.0.113.1", "203.0.113.2"} {
		for i := range 3 {
			if a := do(t, "GET", proxied, "X-Forwarded-For", "198.51.100.99, "+c); (a.status == 200) != (i < 2) {
				t.Fatalf("client %s, request %d: %d", c, i, a.status)
			}
		}
	}
	do(t, "GET", proxied, "X-Forwarded-For", "2001:db8::1")
	do(t, "GET", proxied, "X-Forwarded-For", "2001:db8::2")
	if a := do(t, "GET", proxied, "X-Forwarded-For", "2001:db8::3"); a.status != 429 {
		t.Fatalf("a third address of one /64: %d, want 429", a.status)
	}
	if a := do(t, "GET", proxied, "X-Forwarded-For", "2001:db8:0:1::1"); a.status != 200 {
		t.Fatalf("another /64: %d", a.status)
	}
	// A malformed header from the trusted proxy keys the proxy itself.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "127.0.0.1:9"
	r.Header.Set("X-Forwarded-For", "203.0.113.1, not-an-ip")
	if got := l.Client(r); got != "127.0.0.1" {
		t.Fatalf("malformed header keyed %q", got)
	}
}

// TestDenyKeyLegacy: a custom Deny writes its own body after the headers
// are set; Key names clients; legacy headers come on request.
func TestDenyKeyLegacy(t *testing.T) {
	clock := floodgate.NewManualClock(0)
	_, url := serve(t, Config{Store: local(t, clock), LegacyHeaders: true,
		Routes: []Route{{Pattern: "/", Policies: perHour("p", 1)}},
		Key: func(r *http.Request, client string) string {
			if k := r.Header.Get("X-Api-Key"); k != "" {
				return "key:" + k
			}
			return client
		},
		Deny: func(w http.ResponseWriter, r *http.Request, d floodgate.Decision) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, `{"retry_after_ms":%d}`, d.RetryAfter.Milliseconds())
		},
	})
	a := do(t, "GET", url, "X-Api-Key", "alice")
	if a.status != 200 || a.header.Get("X-RateLimit-Limit") != "1" || a.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("alice: %d, legacy %q %q", a.status, a.header.Get("X-RateLimit-Limit"), a.header.Get("X-RateLimit-Remaining"))
	}
	if a.header.Get("X-RateLimit-Reset") == "" {
		t.Fatal("no X-RateLimit-Reset")
	}
	a = do(t, "GET", url, "X-Api-Key", "alice")
	if a.status != 429 || a.body != `{"retry_after_ms":3600000}` || a.header.Get("Retry-After") != "3600" {
		t.Fatalf("alice again: %d %q, Retry-After %q", a.status, a.body, a.header.Get("Retry-After"))
	}
	if a := do(t, "GET", url, "X-Api-Key", "bob"); a.status != 200 {
		t.Fatalf("bob: %d", a.status)
	}
	if a := do(t, "GET", url); a.status != 200 {
		t.Fatalf("no key, by address: %d", a.status)
	}
}

// TestNewErrors: every bad configuration is an error, none a panic.
func TestNewErrors(t *testing.T) {
	ok := perHour("p", 1)
	for name, cfg := range map[string]Config{
		"bad pattern":       {Routes: []Route{{Pattern: "GET", Policies: ok}}},
		"conflict":          {Routes: []Route{{Pattern: "/a", Policies: ok}, {Pattern: "/a", Policies: ok}}},
		"no policies":       {Routes: []Route{{Pattern: "/a"}}},
		"bad name":          {Routes: []Route{{Pattern: "/a", Policies: perHour(`a"b`, 1)}}},
		"empty name":        {Routes: []Route{{Pattern: "/a", Policies: perHour("", 1)}}},
		"duplicate name":    {Routes: []Route{{Pattern: "/a", Policies: append(perHour("p", 1), ok...)}}},
		"bad rule":          {Routes: []Route{{Pattern: "/a", Policies: perHour("p", 0)}}},
		"bad algorithm":     {Routes: []Route{{Pattern: "/a", Policies: []Policy{{Name: "p", Rule: ok[0].Rule, Algorithm: "nope"}}}}},
		"too many policies": {Routes: []Route{{Pattern: "/a", Policies: nine()}}},
		"bad default":       {Default: []Policy{}},
		"bad cidr":          {TrustedProxies: []string{"10.0.0.0/33"}},
		"cidr without bits": {TrustedProxies: []string{"10.0.0.1"}},
		"ipv6 prefix":       {IPv6Prefix: 129},
		"negative prefix":   {IPv6Prefix: -1},
		"proxy header":      {ProxyHeader: "X-Real-IP"},
	} {
		if l, err := New(cfg); err == nil {
			l.Close()
			t.Errorf("%s: no error", name)
		}
	}
}

func nine() []Policy {
	var ps []Policy
	for i := range 9 {
		ps = append(ps, perHour(fmt.Sprint("p", i), 1)...)
	}
	return ps
}

// TestCloseTwice: Close is idempotent, and the middleware goes on limiting
// after it.
func TestCloseTwice(t *testing.T) {
	l, url := serve(t, Config{Default: []Policy{{Name: "d", Rule: floodgate.Rule{Limit: 1, Period: time.Hour}}}})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp, err := http.Get(url + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d after Close: %d, want %d", i, resp.StatusCode, want)
		}
	}
}

// TestRawAndDecodedFormsChargedUnderBoth: "/api%2Fx" is "/api/x" to
// routers that match the decoded path, and one segment "api/x" to
// ServeMux, which matches the escaped one: the two forms match different
// Routes here ("/api/" and "/"), and the request is charged under both.
// Its headers carry both routes' policies, and it is refused once either
// is spent.
func TestRawAndDecodedFormsChargedUnderBoth(t *testing.T) {
	l, err := New(Config{Routes: []Route{
		{Pattern: "/api/", Policies: perHour("api", 2)},
		{Pattern: "/", Policies: perHour("rest", 3)},
	}, Store: local(t, floodgate.NewManualClock(0))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	ask := func(target string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
		return w
	}
	w := ask("/api%2Fx")
	if got := w.Header().Get("RateLimit-Policy"); got != `"api";q=2;w=3600, "rest";q=3;w=3600` {
		t.Fatalf("RateLimit-Policy %q: want both routes' policies", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"api";r=1;t=1800, "rest";r=2;t=1200` {
		t.Fatalf("RateLimit %q", got)
	}
	ask("/api/y") // the api route alone: its second request
	if w := ask("/api%2Fz"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("with the api route spent, /api%%2Fz answered %d", w.Code)
	}
}

// TestCleanPathsCountUnderTheirRoute: paths that are not canonical count
// under the route of their clean form, and a subtree's path without its
// trailing slash under the subtree, as the router behind serves them;
// HEAD counts under GET's route.
func TestCleanPathsCountUnderTheirRoute(t *testing.T) {
	for _, tc := range []struct{ method, path, route string }{
		{"GET", "/api//login", "api"},
		{"GET", "/api/./login", "api"},
		{"GET", "/api/x/../login", "api"},
		{"GET", "/x/../api/login", "api"},
		{"GET", "/api", "api"},
		{"GET", "//api", "api"},
		{"POST", "//login", "login"},
		{"POST", "/./login", "login"},
		{"HEAD", "/items", "items"},
		{"GET", "/items", "items"},
		{"GET", "/%69tems", "items"},
	} {
		l, err := New(Config{Routes: []Route{
			{Pattern: "/api/", Policies: perHour("api", 2)},
			{Pattern: "POST /login", Policies: perHour("login", 2)},
			{Pattern: "GET /items", Policies: perHour("items", 2)},
		}, Store: local(t, floodgate.NewManualClock(0))})
		if err != nil {
			t.Fatal(err)
		}
		h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := httptest.NewRequest(tc.method, "/", nil)
		r.URL.Path, r.URL.RawPath = mustUnescape(t, tc.path), tc.path
		if r.URL.EscapedPath() != tc.path {
			r.URL.RawPath = ""
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Header().Get("RateLimit-Policy"); !strings.HasPrefix(got, `"`+tc.route+`"`) {
			t.Errorf("%s %s: RateLimit-Policy %q, want the %s route's", tc.method, tc.path, got, tc.route)
		}
		l.Close()
	}
}

func mustUnescape(t *testing.T, p string) string {
	t.Helper()
	u, err := url.PathUnescape(p)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestPolicyQuota: RateLimit-Policy's q is the most a client can hold, so
// that RateLimit's r never exceeds it: Limit over Period, or a Burst above
// Limit over the time it takes to refill; every number is clamped to
// RFC 9651's 15 digits.
func TestPolicyQuota(t *testing.T) {
	for _, tc := range []struct {
		rule floodgate.Rule
		q, w int64
	}{
		{floodgate.Rule{Limit: 10, Period: time.Second}, 10, 1},
		{floodgate.Rule{Limit: 10, Period: time.Second, Burst: 3}, 10, 1},
		{floodgate.Rule{Limit: 10, Period: time.Second, Burst: 100}, 100, 10},
		{floodgate.Rule{Limit: 3, Period: time.Second, Burst: 4}, 4, 2},
		{floodgate.Rule{Limit: 1e17, Period: 1e17}, maxSF, 100_000_000},
	} {
		if q, w := quota(tc.rule); q != tc.q || w != tc.w {
			t.Errorf("%+v: q=%d w=%d, want q=%d w=%d", tc.rule, q, w, tc.q, tc.w)
		}
	}
}

// init registers the token bucket again under a name of the tests' own:
// to floodgate, a registered algorithm, which MaxKeys cannot bound.
func init() {
	err := testhook.Register("httplimit_test_registered", func(r floodgate.Rule) (keystate.Algorithm, error) {
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
	cfg := Config{Default: []Policy{{Name: "d", Algorithm: "httplimit_test_registered",
		Rule: floodgate.Rule{Limit: 1, Period: time.Hour}}}}
	bounded := floodgate.NewLocalStore(floodgate.LocalStoreConfig{MaxKeys: 100})
	defer bounded.Close()
	cfg.Store = bounded
	_, err := New(cfg)
	if err == nil {
		t.Fatal("New bounded a registered algorithm")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "httplimit: default: ") || !strings.Contains(msg, "MaxKeys to 0 or Unbounded") {
		t.Fatalf("error %q does not say to set MaxKeys to 0 or Unbounded", msg)
	}
	cfg.Store = nil
	_, url := serve(t, cfg)
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if a := do(t, "GET", url+"/x"); a.status != want {
			t.Fatalf("request %d: %d, want %d", i, a.status, want)
		}
	}
}
