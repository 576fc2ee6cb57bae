package httplimit

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
)

// holding serves the middleware over a handler that holds every request
// to /hold until release is closed (and answers others at once), on a
// real loopback server. entered receives one value per request the
// handler started.
type holding struct {
	l       *Limiter
	url     string
	entered chan struct{}
	release chan struct{}
}

func serveHolding(t *testing.T, cfg Config) *holding {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &holding{l: l, entered: make(chan struct{}, 64), release: make(chan struct{})}
	srv := httptest.NewServer(l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			h.entered <- struct{}{}
			<-h.release
		case "/panic":
			panic(http.ErrAbortHandler)
		}
		w.Write([]byte("ok"))
	})))
	t.Cleanup(func() {
		srv.Close()
		l.Close()
	})
	h.url = srv.URL
	return h
}

// start sends a request to path in a goroutine; its status arrives on the
// channel.
func (h *holding) start(t *testing.T, path string) <-chan answer {
	c := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", h.url+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			c <- answer{}
			return
		}
		resp.Body.Close()
		c <- answer{status: resp.StatusCode, header: resp.Header}
	}()
	return c
}

// inFlight returns the in-flight gauge of route and policy.
func inFlight(l *Limiter, route, policy string) int64 {
	for _, s := range l.AppendCounts(nil) {
		if s.Metric == counts.InFlight && s.Route == route && s.Policy == policy {
			return s.Value
		}
	}
	return -1
}

func requestCount(l *Limiter, route, policy, result string) int64 {
	for _, s := range l.AppendCounts(nil) {
		if s.Metric == counts.Requests && s.Route == route && s.Policy == policy && s.Label == result {
			return s.Value
		}
	}
	return -1
}

// TestInFlightLimit: a client holds at most InFlight requests at once; a
// third is a 429 with Retry-After and no RateLimit headers, counted as
// denied; a slot comes back when the handler returns, and when it panics;
// other clients are not limited by it.
func TestInFlightLimit(t *testing.T) {
	h := serveHolding(t, Config{Routes: []Route{{Pattern: "/", Policies: []Policy{{Name: "conc", InFlight: 2, RetryAfter: 2500 * time.Millisecond}}}}})
	a, b := h.start(t, "/hold"), h.start(t, "/hold")
	<-h.entered
	<-h.entered
	if got := inFlight(h.l, "/", "conc"); got != 2 {
		t.Fatalf("in-flight gauge with two held = %d", got)
	}
	third := do(t, "GET", h.url+"/hold")
	if third.status != http.StatusTooManyRequests || third.header.Get("Retry-After") != "3" {
		t.Fatalf("a third request: %d, Retry-After %q (want 429, 3)", third.status, third.header.Get("Retry-After"))
	}
	if third.header.Get("RateLimit") != "" || third.header.Get("RateLimit-Policy") != "" {
		t.Errorf("an in-flight refusal carries RateLimit headers: %v", third.header)
	}
	if got := requestCount(h.l, "/", "conc", countinfo.Denied); got != 1 {
		t.Errorf("denied under the policy = %d, want 1", got)
	}
	close(h.release)
	if sa, sb := <-a, <-b; sa.status != 200 || sb.status != 200 {
		t.Fatalf("the held requests: %d, %d", sa.status, sb.status)
	}
	if got := inFlight(h.l, "/", "conc"); got != 0 {
		t.Fatalf("in-flight gauge after both ended = %d", got)
	}
	for range 3 {
		req, _ := http.NewRequest("GET", h.url+"/panic", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	if got := inFlight(h.l, "/", "conc"); got != 0 {
		t.Fatalf("in-flight gauge after panicking handlers = %d", got)
	}
	if got := do(t, "GET", h.url+"/"); got.status != 200 {
		t.Fatalf("after the panics: %d", got.status)
	}
}

// TestInFlightAllOrNothing: a request that the in-flight policy refuses
// is charged by no rate policy of its route, and one that a rate policy
// refuses gives its slot back.
func TestInFlightAllOrNothing(t *testing.T) {
	h := serveHolding(t, Config{Routes: []Route{{Pattern: "/", Policies: []Policy{
		{Name: "conc", InFlight: 1},
		{Name: "hour", Rule: floodgate.Rule{Limit: 3, Period: time.Hour}},
	}}}})
	held := h.start(t, "/hold") // 1 of the rate's 3
	<-h.entered
	for range 5 {
		if got := do(t, "GET", h.url+"/"); got.status != http.StatusTooManyRequests {
			t.Fatalf("while one is held: %d", got.status)
		}
	}
	close(h.release)
	<-held
	// The five refusals were charged nothing: 2 of the rate's 3 are left.
	for i := range 2 {
		if got := do(t, "GET", h.url+"/"); got.status != 200 {
			t.Fatalf("request %d after the in-flight refusals: %d (they were charged)", i+2, got.status)
		}
	}
	refused := do(t, "GET", h.url+"/")
	if refused.status != http.StatusTooManyRequests || refused.header.Get("RateLimit") == "" {
		t.Fatalf("the rate's refusal: %d, RateLimit %q", refused.status, refused.header.Get("RateLimit"))
	}
	if got := inFlight(h.l, "/", "conc"); got != 0 {
		t.Fatalf("a request the rate refused kept its slot: gauge %d", got)
	}
	if got := requestCount(h.l, "/", "hour", countinfo.Denied); got != 1 {
		t.Errorf("denied by the rate = %d, want 1", got)
	}
	if got := requestCount(h.l, "/", "conc", countinfo.Denied); got != 5 {
		t.Errorf("denied by the in-flight limit = %d, want 5", got)
	}
}

// TestInFlightShadowAndTiers: a shadow in-flight policy serves what it
// would refuse and counts it; a tier has its own in-flight policy.
func TestInFlightShadowAndTiers(t *testing.T) {
	h := serveHolding(t, Config{
		Routes: []Route{{Pattern: "/", Policies: []Policy{{Name: "conc", InFlight: 1, Shadow: true}},
			Tiers: map[string][]Policy{"gold": {{Name: "conc", InFlight: 3}}}}},
		Tier: func(r *http.Request, _ string) string { return r.URL.Query().Get("tier") },
	})
	held := h.start(t, "/hold")
	<-h.entered
	if got := do(t, "GET", h.url+"/"); got.status != 200 {
		t.Fatalf("a shadow in-flight policy refused: %d", got.status)
	}
	if got := requestCount(h.l, "/", "conc", countinfo.ShadowDenied); got != 1 {
		t.Errorf("shadow_denied = %d, want 1", got)
	}
	var gold []<-chan answer
	for range 3 {
		gold = append(gold, h.start(t, "/hold?tier=gold"))
		<-h.entered
	}
	if got := do(t, "GET", h.url+"/?tier=gold"); got.status != http.StatusTooManyRequests {
		t.Fatalf("a fourth gold request: %d", got.status)
	}
	if got := inFlight(h.l, "/", "gold/conc"); got != 3 {
		t.Errorf("gold's gauge = %d, want 3", got)
	}
	close(h.release)
	<-held
	for _, g := range gold {
		<-g
	}
}

// TestInFlightManyClients: 64 goroutines, each a burst of requests from
// one of a few clients (by X-Client), never find more than InFlight of a
// client inside the handler at once, and every slot is free at the end.
func TestInFlightManyClients(t *testing.T) {
	const limit = 3
	var mu sync.Mutex
	inside, most := map[string]int{}, 0
	l, err := New(Config{Routes: []Route{{Pattern: "/", Policies: []Policy{{Name: "conc", InFlight: limit}}}},
		Key: func(r *http.Request, _ string) string { return r.Header.Get("X-Client") }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := httptest.NewServer(l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.Header.Get("X-Client")
		mu.Lock()
		inside[c]++
		most = max(most, inside[c])
		mu.Unlock()
		for range 50 {
			runtime.Gosched()
		}
		mu.Lock()
		inside[c]--
		mu.Unlock()
	})))
	defer srv.Close()
	var wg sync.WaitGroup
	var served, refused sync.Map
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := []string{"a", "b", "c"}[g%3]
			for range 20 {
				req, _ := http.NewRequest("GET", srv.URL, nil)
				req.Header.Set("X-Client", client)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode == 200 {
					served.Store(g, true)
				} else {
					refused.Store(g, true)
				}
			}
		}()
	}
	wg.Wait()
	if most > limit {
		t.Fatalf("%d requests of one client inside the handler at once, limit %d", most, limit)
	}
	if got := inFlight(l, "/", "conc"); got != 0 {
		t.Fatalf("gauge at the end = %d", got)
	}
	t.Logf("most inside at once: %d", most)
}

// TestInFlightConfigErrors: an in-flight policy takes no rate, no
// negative limit or wait, and needs a Store that holds slots; SetRoutes
// cannot turn a rate policy into an in-flight one, and a new limit
// reaches the kept policy.
func TestInFlightConfigErrors(t *testing.T) {
	for _, c := range []struct {
		p    Policy
		want string
	}{
		{Policy{Name: "x", InFlight: -1}, "an in-flight limit of -1"},
		{Policy{Name: "x", InFlight: 2, Rule: floodgate.Rule{Limit: 1, Period: time.Second}}, "has no Rule"},
		{Policy{Name: "x", InFlight: 2, RetryAfter: -time.Second}, "a RetryAfter of -1s"},
		{Policy{Name: "x", RetryAfter: time.Second}, "an in-flight limit of 0"},
	} {
		if _, err := New(Config{Default: []Policy{c.p}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
	store := floodgate.NewLocalStore(floodgate.LocalStoreConfig{})
	defer store.Close()
	type rateOnly struct{ floodgate.Store }
	if _, err := New(Config{Store: rateOnly{store}, Default: []Policy{{Name: "x", InFlight: 1}}}); err == nil || !strings.Contains(err.Error(), "floodgate.SlotStore") {
		t.Errorf("an in-flight policy on a Store without slots: %v", err)
	}
	l, err := New(Config{Store: store, Default: []Policy{{Name: "x", InFlight: 1}, {Name: "r", Rule: floodgate.Rule{Limit: 9, Period: time.Hour}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetRoutes(nil, []Policy{{Name: "x", Rule: floodgate.Rule{Limit: 1, Period: time.Second}}, {Name: "r", Rule: floodgate.Rule{Limit: 9, Period: time.Hour}}}); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("an in-flight policy turned into a rate: %v", err)
	}
	if err := l.SetRoutes(nil, []Policy{{Name: "x", InFlight: 1}, {Name: "r", InFlight: 1}}); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("a rate policy turned into an in-flight one: %v", err)
	}
	h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner := httptest.NewRecorder()
		code := 0
		if r.URL.Path == "/nested" {
			l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(inner, httptest.NewRequest("GET", "/", nil))
			code = inner.Code
		}
		w.Header().Set("X-Inner", http.StatusText(code))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/nested", nil))
	if rec.Code != 200 || rec.Header().Get("X-Inner") != "Too Many Requests" {
		t.Fatalf("a second request of the client inside the first: outer %d, inner %q", rec.Code, rec.Header().Get("X-Inner"))
	}
	if err := l.SetRoutes(nil, []Policy{{Name: "x", InFlight: 2}, {Name: "r", Rule: floodgate.Rule{Limit: 9, Period: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/nested", nil))
	if rec.Header().Get("X-Inner") != "OK" {
		t.Fatalf("under a limit raised to 2, the nested request: %q", rec.Header().Get("X-Inner"))
	}
}

// TestInFlightHotPathAllocs: an in-flight policy adds no allocation to a
// request in process.
func TestInFlightHotPathAllocs(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector drops pooled objects on purpose")
	}
	l, err := New(Config{Default: []Policy{{Name: "default", Rule: floodgate.Rule{Limit: 1 << 40, Period: time.Hour}}, {Name: "conc", InFlight: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w := &headerOnly{h: http.Header{}}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	h.ServeHTTP(w, r)
	if n := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}); n != 1 {
		t.Errorf("%v allocations per request, want 1 (the RateLimit value, as without the in-flight policy)", n)
	}
	if got := inFlight(l, defaultRoute, "conc"); got != 0 {
		t.Errorf("gauge at the end = %d", got)
	}
}
