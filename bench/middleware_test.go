package bench

import (
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	fghttp "github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
)

// discard is a ResponseWriter that keeps headers and drops the body, reset
// between calls, so that the benchmark times the middleware and not a
// recorder.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(s int)           { d.status = s }

// middlewares are the HTTP middlewares compared: none at all, floodgate's
// httplimit, go-chi/httprate and go-limiter's httplimit, each keyed by the
// client's address (RemoteAddr, no proxy) with a rule none of them refuses
// in the benchmark.
var middlewares = []struct {
	name string
	make func(b *testing.B) func(http.Handler) http.Handler
}{
	{"bare", func(*testing.B) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler { return h }
	}},
	{"floodgate", func(b *testing.B) func(http.Handler) http.Handler {
		l, err := fghttp.New(fghttp.Config{Default: []fghttp.Policy{{Name: "default",
			Rule: floodgate.Rule{Limit: 1 << 40, Period: time.Hour}}}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l.Handler
	}},
	// floodgate's httplimit with its per-route counts switched off (an
	// internal switch users cannot reach): floodgate less this is what
	// counting costs a request.
	{"floodgate-uncounted", func(b *testing.B) func(http.Handler) http.Handler {
		l, err := fghttp.New(testhook.Uncounted(fghttp.Config{Default: []fghttp.Policy{{Name: "default",
			Rule: floodgate.Rule{Limit: 1 << 40, Period: time.Hour}}}}).(fghttp.Config))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l.Handler
	}},
	{"httprate", func(*testing.B) func(http.Handler) http.Handler {
		// As httprate's documentation keys by the peer: its address, /64 for IPv6.
		return httprate.LimitBy(1<<30, time.Hour, func(r *http.Request) (string, error) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			return httprate.CanonicalizeIP(host), err
		})
	}},
	{"golimiter", func(b *testing.B) func(http.Handler) http.Handler {
		store, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close(b.Context()) })
		m, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
		if err != nil {
			b.Fatal(err)
		}
		return m.Handle
	}},
}

// BenchmarkMiddleware times one request through each middleware and a
// handler that writes a short body, from one client or from 1,000, on one
// goroutine: the middleware's overhead is its figure minus bare's.
func BenchmarkMiddleware(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	for _, clients := range []int{1, 1000} {
		reqs := make([]*http.Request, clients)
		for i := range reqs {
			r, _ := http.NewRequest("GET", "http://example.test/hello", nil)
			r.RemoteAddr = "198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":4711"
			reqs[i] = r
		}
		for _, m := range middlewares {
			b.Run("scenario=clients-"+strconv.Itoa(clients)+"/impl="+m.name, func(b *testing.B) {
				h := m.make(b)(ok)
				w := &discard{h: http.Header{}}
				for _, r := range reqs {
					h.ServeHTTP(w, r)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					clear(w.h)
					w.status = 0
					h.ServeHTTP(w, reqs[i%clients])
					i++
				}
				if w.status != 0 && w.status != http.StatusOK {
					b.Fatalf("%s answered %d", m.name, w.status)
				}
			})
		}
	}
}
