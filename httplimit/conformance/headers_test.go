package conformance

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// TestHeadersParse: for every algorithm, and rules with a Burst above the
// Limit and Limits beyond 15 digits, every RateLimit-Policy and RateLimit
// header parses as a Structured Fields List with httpsfv, every value is
// an Integer in RFC 9651's range, and each policy's r never exceeds its q,
// from its first request until it is refused.
func TestHeadersParse(t *testing.T) {
	big := int64(1e17) // 18 digits, and no faster than one a nanosecond
	rules := []struct {
		algorithm string
		rule      floodgate.Rule
	}{
		{floodgate.TokenBucket, floodgate.Rule{Limit: 10, Period: time.Second, Burst: 100}},
		{floodgate.TokenBucket, floodgate.Rule{Limit: 100, Period: time.Second, Burst: 3}},
		{floodgate.TokenBucket, floodgate.Rule{Limit: big, Period: time.Duration(big)}},
		{floodgate.TokenBucket, floodgate.Rule{Limit: 1e9, Period: time.Second, Burst: big / 10}},
		{floodgate.LeakyBucket, floodgate.Rule{Limit: 5, Period: time.Minute, Burst: 50}},
		{floodgate.LeakyBucket, floodgate.Rule{Limit: big, Period: 2 * time.Duration(big)}},
		{floodgate.FixedWindow, floodgate.Rule{Limit: 3, Period: time.Minute}},
		{floodgate.FixedWindow, floodgate.Rule{Limit: 1<<47 - 2, Period: 1000 * time.Hour}},
		{floodgate.SlidingCounter, floodgate.Rule{Limit: 4, Period: time.Second}},
		{floodgate.SlidingCounter, floodgate.Rule{Limit: 8_388_606, Period: time.Hour}},
		{floodgate.SlidingLog, floodgate.Rule{Limit: 3, Period: time.Minute}},
	}
	for _, r := range rules {
		store := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: floodgate.NewManualClock(0)})
		t.Cleanup(func() { store.Close() })
		lim, err := httplimit.New(httplimit.Config{
			Default: []httplimit.Policy{
				{Name: "main", Algorithm: r.algorithm, Rule: r.rule},
				{Name: "second", Rule: floodgate.Rule{Limit: 1000, Period: time.Hour}},
			},
			Store: store,
		})
		if err != nil {
			t.Fatalf("%s %+v: %v", r.algorithm, r.rule, err)
		}
		h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		q := map[string]int64{}
		for i := 0; i < 200; i++ {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			policies := parse(t, w.Header().Values("RateLimit-Policy"), "q", "w")
			for name, p := range policies {
				q[name] = p["q"]
			}
			for name, p := range parse(t, w.Header().Values("RateLimit"), "r", "t") {
				if p["r"] > q[name] {
					t.Fatalf("%s %+v request %d: %q has r=%d above q=%d", r.algorithm, r.rule, i, name, p["r"], q[name])
				}
			}
			if w.Code == http.StatusTooManyRequests {
				break
			}
			if i == 199 && r.rule.Capacity() < 200 {
				t.Fatalf("%s %+v: never refused", r.algorithm, r.rule)
			}
		}
		lim.Close()
	}
}

// parse reads a RateLimit header as a Structured Fields List of String
// items, each with the Integer parameters named, and returns them by item.
func parse(t *testing.T, values []string, params ...string) map[string]map[string]int64 {
	t.Helper()
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%q is not a Structured Fields List: %v", values, err)
	}
	out := map[string]map[string]int64{}
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%q: a member is not an Item", values)
		}
		name, ok := item.Value.(string)
		if !ok {
			t.Fatalf("%q: an item's value is not a String", values)
		}
		out[name] = map[string]int64{}
		for _, p := range params {
			v, ok := item.Params.Get(p)
			if !ok {
				t.Fatalf("%q: %s lacks %s", values, name, p)
			}
			n, ok := v.(int64)
			if !ok || n < 0 || n > 999_999_999_999_999 {
				t.Fatalf("%q: %s's %s = %v is not an Integer in range", values, name, p, v)
			}
			out[name][p] = n
		}
	}
	return out
}
