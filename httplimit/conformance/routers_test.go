package conformance

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"
)

func perHour(name string, limit int64) []httplimit.Policy {
	return []httplimit.Policy{{Name: name, Rule: floodgate.Rule{Limit: limit, Period: time.Hour}}}
}

// routes are the limited endpoints every router serves: a subtree, a
// method-specific path, and a GET path that HEAD reaches too.
var routes = []httplimit.Route{
	{Pattern: "/api/", Policies: perHour("api", 2)},
	{Pattern: "POST /login", Policies: perHour("login", 2)},
	{Pattern: "GET /items", Policies: perHour("items", 2)},
}

// routers put the middleware in front of the same endpoints as users do:
// ServeMux behind lim.Handler, chi and gorilla/mux with Use, gorilla also
// with SkipClean (it then serves paths it would otherwise redirect) and
// with UseEncodedPath (it then routes on the escaped path).
var routers = []struct {
	name  string
	build func(lim *httplimit.Limiter, ok http.Handler) http.Handler
}{
	{"ServeMux", func(lim *httplimit.Limiter, ok http.Handler) http.Handler {
		m := http.NewServeMux()
		m.Handle("/api/", ok)
		m.Handle("POST /login", ok)
		m.Handle("GET /items", ok)
		return lim.Handler(m)
	}},
	{"chi", func(lim *httplimit.Limiter, ok http.Handler) http.Handler {
		r := chi.NewRouter()
		r.Use(lim.Handler)
		r.Handle("/api/*", ok)
		r.Handle("/api", ok)
		r.Method("POST", "/login", ok)
		r.Method("GET", "/items", ok)
		r.Method("HEAD", "/items", ok)
		return r
	}},
	{"gorilla", func(lim *httplimit.Limiter, ok http.Handler) http.Handler {
		return gorillaRouter(mux.NewRouter(), lim, ok)
	}},
	{"gorilla-SkipClean", func(lim *httplimit.Limiter, ok http.Handler) http.Handler {
		return gorillaRouter(mux.NewRouter().SkipClean(true), lim, ok)
	}},
	{"gorilla-UseEncodedPath", func(lim *httplimit.Limiter, ok http.Handler) http.Handler {
		return gorillaRouter(mux.NewRouter().SkipClean(true).UseEncodedPath(), lim, ok)
	}},
}

func gorillaRouter(r *mux.Router, lim *httplimit.Limiter, ok http.Handler) http.Handler {
	r.Use(lim.Handler)
	r.PathPrefix("/api").Handler(ok)
	r.Handle("/login", ok).Methods("POST")
	r.Handle("/items", ok).Methods("GET", "HEAD")
	return r
}

// attacks are requests for a limited endpoint by a path that is not the
// endpoint's canonical one, as a client writes it on the wire.
var attacks = []struct{ method, path string }{
	{"GET", "/api/login"}, // the canonical form, for comparison
	{"GET", "/api//login"},
	{"GET", "/api/./login"},
	{"GET", "/api/x/../login"},
	{"GET", "/api"},
	{"GET", "/api%2Fx"},
	{"GET", "/api/%2e%2e/login"},
	{"GET", "//api/login"},
	{"GET", "/%61pi/login"},
	{"POST", "/login"},
	{"POST", "//login"},
	{"POST", "/./login"},
	{"POST", "/x/../login"},
	{"POST", "/login/"},
	{"GET", "/items"},
	{"HEAD", "/items"},
	{"GET", "/items/"},
	{"GET", "//items"},
}

// TestNoPathEscapesItsLimit sends each attack ten times from one client
// through each router, with a fresh middleware each time, and counts the
// requests the endpoint's handler served: never more than the limit of 2,
// whatever the router makes of the path.
func TestNoPathEscapesItsLimit(t *testing.T) {
	for _, rt := range routers {
		for _, a := range attacks {
			t.Run(rt.name+"/"+a.method+" "+a.path, func(t *testing.T) {
				lim, err := httplimit.New(httplimit.Config{Routes: routes})
				if err != nil {
					t.Fatal(err)
				}
				defer lim.Close()
				ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("X-Served", "1")
				})
				srv := httptest.NewServer(rt.build(lim, ok))
				defer srv.Close()
				served, limited := 0, 0
				for range 10 {
					resp := raw(t, srv.Listener.Addr().String(), a.method, a.path)
					if resp.Header.Get("X-Served") == "1" {
						served++
					}
					if resp.Header.Get("RateLimit") != "" {
						limited++
					}
				}
				if served > 2 {
					t.Fatalf("%s %s through %s: the handler served %d of 10 under a limit of 2", a.method, a.path, rt.name, served)
				}
				if served > 0 && limited < 10 {
					t.Fatalf("%s %s through %s: served %d, yet %d answers carried no RateLimit header", a.method, a.path, rt.name, served, 10-limited)
				}
			})
		}
	}
}

// raw sends one request with exactly this method and path on the wire,
// and reads the answer.
func raw(t *testing.T, addr, method, path string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", method, path); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	if strings.HasPrefix(resp.Status, "5") {
		t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
	return resp
}
