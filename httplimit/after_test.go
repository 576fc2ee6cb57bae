package httplimit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// spent is one answer of a test server with an After policy: its status,
// what the RateLimit header says remains (-1 for none), its body, and its
// headers and trailers as the client saw them.
type spent struct {
	status    int
	remaining int64
	body      string
	header    http.Header
	trailer   http.Header
}

var remainingRE = regexp.MustCompile(`;r=(\d+)`)

func get(t *testing.T, url string) spent {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sp := spent{status: resp.StatusCode, remaining: -1, body: string(body), header: resp.Header, trailer: resp.Trailer}
	if m := remainingRE.FindStringSubmatch(resp.Header.Get("RateLimit")); m != nil {
		sp.remaining, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return sp
}

// budgetServer serves handler behind a middleware whose one route has a
// budget of 1,000 units an hour, an After policy of estimate est, with
// cost header header (or none), in process on a manual clock. Each
// request sends on served, if not nil, once the middleware has settled
// it.
func budgetServer(t *testing.T, est int64, header string, handler http.HandlerFunc, served ...chan struct{}) string {
	t.Helper()
	l, err := New(Config{
		Routes: []Route{{Pattern: "/spend", Policies: []Policy{
			{Name: "budget", Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}, After: true, Estimate: est, CostHeader: header}}}},
		Store: local(t, floodgate.NewManualClock(int64(time.Hour))),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := l.Handler(handler)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		for _, c := range served {
			c <- struct{}{}
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/spend"
}

// TestAfterCost: Envoy AI Gateway's pattern through the middleware, a
// budget of 1,000 an hour checked at each request (Estimate 0), each
// request streaming a response that costs 600, reported four ways: by
// Report as the chunks go, by a header, by a declared trailer, and by a
// trailer set with http.TrailerPrefix. The first two requests are served
// (the second's RateLimit header shows the first's cost), the second's
// cost leaves the client owing 200, and the third is refused. The cost
// never reaches the client, as a header, a trailer or a Trailer
// announcement.
func TestAfterCost(t *testing.T) {
	const body = "chunk one. chunk two. chunk three."
	ways := map[string]struct {
		header  string
		handler http.HandlerFunc
	}{
		"report": {"", func(w http.ResponseWriter, r *http.Request) {
			for _, c := range strings.SplitAfter(body, ". ") {
				io.WriteString(w, c)
				http.NewResponseController(w).Flush()
				Report(w, 200)
			}
		}},
		"header": {"X-Tokens", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens", "600")
			io.WriteString(w, body)
		}},
		"trailer": {"X-Tokens", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Other, X-Tokens")
			io.WriteString(w, body)
			http.NewResponseController(w).Flush()
			w.Header().Set("X-Tokens", "600")
			w.Header().Set("X-Other", "kept")
		}},
		"prefix": {"X-Tokens", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, body)
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"x-tokens", "600")
		}},
	}
	for name, way := range ways {
		t.Run(name, func(t *testing.T) {
			url := budgetServer(t, 0, way.header, way.handler)
			var got []spent
			for range 3 {
				got = append(got, get(t, url))
			}
			for i, want := range []struct {
				status    int
				remaining int64
			}{{200, 1000}, {200, 400}, {429, 0}} {
				if got[i].status != want.status || got[i].remaining != want.remaining {
					t.Errorf("request %d: %d with %d remaining, want %d with %d", i+1, got[i].status, got[i].remaining, want.status, want.remaining)
				}
			}
			if got[0].body != body {
				t.Errorf("the body: %q", got[0].body)
			}
			for i, a := range got[:2] {
				_, announced := a.trailer["X-Tokens"] // a Trailer header's names are the client's Trailer keys
				if a.header.Get("X-Tokens") != "" || announced || strings.Contains(strings.ToLower(a.header.Get("Trailer")), "tokens") {
					t.Errorf("request %d: the cost reached the client: header %v, trailer %v", i+1, a.header, a.trailer)
				}
			}
			if name == "trailer" && got[0].trailer.Get("X-Other") != "kept" {
				t.Errorf("another trailer was lost: %v", got[0].trailer)
			}
			if ra := got[2].header.Get("Retry-After"); ra == "" {
				t.Error("the refusal has no Retry-After")
			}
		})
	}
}

// TestAfterEstimate: a reservation of 500 settled to 100 gives 400 back;
// one whose handler reports nothing keeps its 500; one refused by the
// budget reaches no handler.
func TestAfterEstimate(t *testing.T) {
	var cost int64 = 100
	url := budgetServer(t, 500, "", func(w http.ResponseWriter, r *http.Request) {
		if cost >= 0 {
			Report(w, cost)
		}
	})
	if a := get(t, url); a.status != 200 || a.remaining != 500 {
		t.Fatalf("the first request: %d with %d remaining, want 200 with 500 (after its estimate)", a.status, a.remaining)
	}
	cost = -1 // reports nothing: its estimate stands
	if a := get(t, url); a.status != 200 || a.remaining != 400 {
		t.Fatalf("after a settlement of 100: %d with %d remaining, want 400 (900 less the estimate)", a.status, a.remaining)
	}
	if a := get(t, url); a.status != 429 {
		t.Fatalf("with 400 left, a reservation of 500: %d, want 429", a.status)
	}
}

// TestAfterAttacks: what a client or a faulty backend can do to an After
// policy. A client that leaves mid-stream still pays what was streamed; a
// handler that panics pays what it reported; a cost header that is not
// one non-negative decimal integer leaves the estimate charged (a
// negative value gives nothing back); a huge cost counts as 2^52.
func TestAfterAttacks(t *testing.T) {
	t.Run("client leaves", func(t *testing.T) {
		streamed := make(chan struct{})
		done := make(chan struct{}, 1)
		served := make(chan struct{}, 16)
		url := budgetServer(t, 0, "", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("leave") == "" {
				return
			}
			io.WriteString(w, "first")
			http.NewResponseController(w).Flush()
			Report(w, 700)
			close(streamed)
			<-r.Context().Done()
		}, served)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"?leave=1", nil)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- struct{}{}
		}()
		<-streamed
		cancel()
		<-done
		<-served // the server saw the client go, and settled
		if a := get(t, url); a.remaining != 300 {
			t.Fatalf("after a client left mid-stream: %d remaining, want 300", a.remaining)
		}
	})
	t.Run("panic", func(t *testing.T) {
		url := budgetServer(t, 0, "", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("panic") != "" {
				Report(w, 800)
				panic(http.ErrAbortHandler)
			}
		})
		if resp, err := http.Get(url + "?panic=1"); err == nil {
			resp.Body.Close()
		}
		if a := get(t, url); a.remaining != 200 {
			t.Errorf("after a handler that reported 800 panicked: %d remaining, want 200", a.remaining)
		}
	})
	for _, v := range []string{"-5", "abc", "1e3", "+7", " 7 8", "0x10", ""} {
		t.Run("header "+strconv.Quote(v), func(t *testing.T) {
			url := budgetServer(t, 100, "X-Cost", func(w http.ResponseWriter, r *http.Request) {
				w.Header()["X-Cost"] = []string{v}
			})
			get(t, url)
			if a := get(t, url); a.remaining != 800 {
				t.Errorf("a cost header of %q: %d remaining after two requests, want 800 (two estimates of 100)", v, a.remaining)
			}
		})
	}
	t.Run("two values", func(t *testing.T) {
		url := budgetServer(t, 100, "X-Cost", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("X-Cost", "1")
			w.Header().Add("X-Cost", "1")
		})
		get(t, url)
		if a := get(t, url); a.remaining != 800 {
			t.Errorf("two cost headers: %d remaining, want 800 (the estimates)", a.remaining)
		}
	})
	t.Run("huge", func(t *testing.T) {
		url := budgetServer(t, 0, "X-Cost", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Cost", "99999999999999999999999")
		})
		get(t, url)
		a := get(t, url)
		ra, _ := strconv.ParseInt(a.header.Get("Retry-After"), 10, 64)
		if a.status != 429 || ra < 1e9 {
			t.Errorf("after a cost past 2^64: %d, Retry-After %d s; want a refusal for ages", a.status, ra)
		}
	})
}

// TestAfterConfig: a CostHeader or an Estimate without After, an
// Estimate past the rule's capacity or below 0, a CostHeader that names
// a header the response needs or no header at all, and an After policy
// on a Store that cannot settle, are each New's error; Report on a
// request with no After policy counts nothing.
func TestAfterConfig(t *testing.T) {
	rule := floodgate.Rule{Limit: 10, Period: time.Minute}
	for name, p := range map[string]Policy{
		"header without After":   {Name: "a", Rule: rule, CostHeader: "X-Cost"},
		"estimate without After": {Name: "a", Rule: rule, Estimate: 1},
		"estimate past capacity": {Name: "a", Rule: rule, After: true, Estimate: 11},
		"negative estimate":      {Name: "a", Rule: rule, After: true, Estimate: -1},
		"Content-Length":         {Name: "a", Rule: rule, After: true, CostHeader: "content-length"},
		"RateLimit":              {Name: "a", Rule: rule, After: true, CostHeader: "RateLimit"},
		"not a name":             {Name: "a", Rule: rule, After: true, CostHeader: "X Cost"},
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
	rec := httptest.NewRecorder()
	if Report(rec, 5) {
		t.Error("Report on a request with no After policy said it counted")
	}
	if Report(nil, 5) {
		t.Error("Report on nil said it counted")
	}
}

// plainStore is a Store with no Settler's methods.
type plainStore struct{ floodgate.Store }
