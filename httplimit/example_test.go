package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/httplimit"
)

// get sends one request from 192.0.2.1 through h and returns the status.
func get(h http.Handler, path string) int {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = "192.0.2.1:4711"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

// A route with its limit, a health check exempt from it, and the counts
// that the metrics modules export.
func Example() {
	lim, err := httplimit.New(httplimit.Config{
		Routes: []httplimit.Route{{Pattern: "GET /hello", Policies: []httplimit.Policy{
			{Name: "hello", Rule: floodgate.Rule{Limit: 2, Period: time.Minute}},
		}}},
		Exempt:  func(r *http.Request) bool { return r.URL.Path == "/healthz" }, // decided by the server, not by the client
		Default: []httplimit.Policy{{Name: "default", Rule: floodgate.Rule{Limit: 100, Period: time.Minute}}},
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	h := lim.Handler(http.HandlerFunc(ok))
	fmt.Println(get(h, "/hello"), get(h, "/hello"), get(h, "/hello"), get(h, "/healthz"))
	for _, s := range lim.AppendCounts(nil) {
		if s.Metric == counts.Requests && s.Value > 0 {
			fmt.Println(s.Route, s.Policy, s.Label, s.Value)
		}
	}
	// Output:
	// 200 200 429 200
	// GET /hello  allowed 2
	// GET /hello hello denied 1
	// default  exempt 1
}

// Shadow mode: a new, stricter policy runs beside the enforced one,
// refuses nothing, and counts what it would have refused.
func Example_shadow() {
	lim, err := httplimit.New(httplimit.Config{Routes: []httplimit.Route{{Pattern: "/", Policies: []httplimit.Policy{
		{Name: "current", Rule: floodgate.Rule{Limit: 100, Period: time.Minute}},
		{Name: "proposed", Rule: floodgate.Rule{Limit: 3, Period: time.Minute}, Shadow: true},
	}}}})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	h := lim.Handler(http.HandlerFunc(ok))
	served := 0
	for range 10 {
		if get(h, "/") == 200 {
			served++
		}
	}
	for _, s := range lim.AppendCounts(nil) {
		if s.Metric == counts.Requests && s.Label == "shadow_denied" && s.Policy == "proposed" {
			fmt.Printf("served %d of 10; %q would have refused %d\n", served, s.Policy, s.Value)
		}
	}
	// Output: served 10 of 10; "proposed" would have refused 7
}

// Replacing the routes while serving: the kept policy keeps its clients'
// state, so a reload hands no one a fresh allowance.
func ExampleLimiter_SetRoutes() {
	login := []httplimit.Policy{{Name: "login", Rule: floodgate.Rule{Limit: 1, Period: time.Hour}}}
	lim, err := httplimit.New(httplimit.Config{Routes: []httplimit.Route{{Pattern: "POST /login", Policies: login}}})
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	h := lim.Handler(http.HandlerFunc(ok))
	post := func() int {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = "192.0.2.1:4711"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	fmt.Println(post(), post())
	err = lim.SetRoutes([]httplimit.Route{
		{Pattern: "POST /login", Policies: login},
		{Pattern: "/search", Policies: []httplimit.Policy{{Name: "search", Rule: floodgate.Rule{Limit: 10, Period: time.Second}}}},
	}, nil)
	fmt.Println(err, post(), get(h, "/search"))
	// Output:
	// 200 429
	// <nil> 429 200
}
