package httplimit

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate/counts"
)

// TestZeroConfigBoundsMemory sends 8,000,000 distinct clients, each its
// own IPv6 /64 (a /32 holds 4.3 billion), through the zero-value
// middleware on one route with one policy of 2 an hour, and finds the heap
// it holds within the default bound's 64 MiB and a MiB. Every thousandth
// client comes back twice, long after it was surely evicted at the bound:
// none passes more than its rule. It does not run under the race
// detector, whose own allocations make a heap figure meaningless and
// would take minutes; make test and make check run it without -race.
func TestZeroConfigBoundsMemory(t *testing.T) {
	if raceDetector {
		t.Skip("a heap figure under the race detector means nothing: make test runs this test without -race")
	}
	const clients, every = 8_000_000, 1000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, err := New(Config{Routes: []Route{{Pattern: "/", Policies: perHour("p", 2)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	w := &headerOnly{h: http.Header{}}
	admitted := make([]int8, clients/every)
	ask := func(i int) bool {
		r.RemoteAddr = "[2001:db8:" + strconv.FormatUint(uint64(i>>16), 16) + ":" + strconv.FormatUint(uint64(i&0xffff), 16) + "::1]:443"
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, r)
		return w.status == 0
	}
	for i := range clients {
		if ask(i) && i%every == 0 {
			admitted[i/every]++
		}
		// A sampled client returns twice, a quarter and a half of the run
		// later, each time after millions of newer clients.
		for _, back := range []int{clients / 4, clients / 2} {
			if j := i - back; j >= 0 && j%every == 0 && ask(j) {
				admitted[j/every]++
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if limit := int64(64<<20 + 1<<20); held > limit { // the default bound's 64 MiB, and a MiB of slack
		t.Errorf("the zero-value middleware holds %d bytes after %d clients, above %d", held, clients, limit)
	}
	for k, n := range admitted {
		if n > 2 {
			t.Fatalf("client %d passed %d requests, above its rule of 2 an hour", k*every, n)
		}
	}
	var keys, bound int64
	for _, c := range l.AppendCounts(nil) {
		switch c.Metric {
		case counts.Keys:
			keys = c.Value
		case counts.KeysMax:
			bound = c.Value
		}
	}
	t.Logf("%d clients: %.1f MiB held, %d keys (the default bound %d)", clients, float64(held)/(1<<20), keys, bound)
	runtime.KeepAlive(l)
}

// headerOnly is a ResponseWriter that keeps the headers and the status.
type headerOnly struct {
	h      http.Header
	status int
}

func (w *headerOnly) Header() http.Header         { return w.h }
func (w *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerOnly) WriteHeader(status int)      { w.status = status }
