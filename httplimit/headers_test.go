package httplimit

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/policy"
)

// TestAppendSF holds appendSF to strconv over the edges of every digit
// count and random values up to maxSF.
func TestAppendSF(t *testing.T) {
	vs := []int64{0, maxSF}
	for p := int64(1); p <= maxSF; p *= 10 {
		vs = append(vs, p-1, p, p+1, 2*p, 5*p-1, 9*p)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		vs = append(vs, rng.Int64N(maxSF+1), rng.Int64N(1_000_000))
	}
	for p, n := uint64(10), 2; n <= 20; p, n = p*10, n+1 {
		if digits(p-1) != n-1 || digits(p) != n {
			t.Fatalf("digits(%d) = %d, digits(%d) = %d", p-1, digits(p-1), p, digits(p))
		}
		if n == 20 {
			break // p is 1e19, the last power of ten a uint64 holds
		}
	}
	if digits(0) != 1 || digits(1<<64-1) != 20 {
		t.Fatalf("digits(0) = %d, digits(max) = %d", digits(0), digits(1<<64-1))
	}
	for _, v := range vs {
		if v > maxSF {
			continue
		}
		if got, want := string(appendSF([]byte("x"), v)), "x"+strconv.FormatInt(v, 10); got != want {
			t.Fatalf("appendSF(%d) = %q, want %q", v, got, want)
		}
	}
}

// rateLimitReference is the RateLimit value as written before Set.Items
// and newValue: with fmt-free strconv, from the names, item by item.
func rateLimitReference(s *policy.Set, each []floodgate.Decision) string {
	var items []string
	for _, i := range s.Shown {
		d := each[i]
		items = append(items, `"`+s.Names[i]+`";r=`+strconv.FormatInt(min(max(0, d.Remaining), maxSF), 10)+
			";t="+strconv.FormatInt(min(ceilSeconds(d.ResetAfter), maxSF), 10))
	}
	return strings.Join(items, ", ")
}

// TestRateLimitValue holds rateLimit to rateLimitReference on routes of 1
// to 8 policies, with names of 1 to 64 characters (each of newValue's
// object sizes, and the two allocations past them), shadow policies shown
// and hidden, and random answers including the clamped extremes; and
// checks that no value shares its bytes with another.
func TestRateLimitValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	durations := []time.Duration{-1, 0, 1, time.Second - 1, time.Second, time.Second + 1, time.Hour, 1<<63 - 1}
	remaining := []int64{-5, 0, 1, 9, 10, maxSF - 1, maxSF, maxSF + 1, 1<<63 - 1}
	sizes := map[int]bool{}
	for _, nameLen := range []int{1, 7, 8, 20, 64} {
		for policies := 1; policies <= 8; policies++ {
			for _, show := range []bool{false, true} {
				ps := make([]Policy, policies)
				for i := range ps {
					name := strings.Repeat(string(rune('a'+i)), nameLen)
					ps[i] = Policy{Name: name, Rule: floodgate.Rule{Limit: 10, Period: time.Minute}, Shadow: i%3 == 1}
				}
				l, err := New(Config{Default: ps, ShadowHeaders: show})
				if err != nil {
					t.Fatal(err)
				}
				s := l.table.Load().deflt.For("")
				var prev []string
				for range 50 {
					each := make([]floodgate.Decision, policies)
					for i := range each {
						each[i] = floodgate.Decision{Remaining: remaining[rng.IntN(len(remaining))], ResetAfter: durations[rng.IntN(len(durations))]}
						if rng.IntN(2) == 0 {
							each[i].Remaining, each[i].ResetAfter = rng.Int64N(maxSF), time.Duration(rng.Int64N(int64(100*time.Hour)))
						}
					}
					got, want := rateLimit(s, each), rateLimitReference(s, each)
					if len(got) != 1 || cap(got) != 1 || got[0] != want {
						t.Fatalf("%d policies named %d characters: %q (cap %d), want [%q]", policies, nameLen, got, cap(got), want)
					}
					sizes[len(want)] = true
					if prev != nil && prev[0] != prev[1] {
						t.Fatalf("an earlier value changed to %q from %q", prev[0], prev[1])
					}
					prev = []string{got[0], strings.Clone(got[0])}
				}
				l.Close()
			}
		}
	}
	for _, n := range []int{len(value48{}.b), len(value64{}.b), len(value80{}.b), len(value96{}.b), len(value128{}.b), len(value256{}.b)} {
		below, above := false, false
		for size := range sizes {
			below = below || size <= n && size > n-16
			above = above || size > n
		}
		if !below || !above {
			t.Errorf("no value just within %d bytes (%v) or above them (%v): the sizes do not exercise newValue", n, below, above)
		}
	}
}

// TestHotPathAllocs: a request from a client the policy already holds
// makes one allocation, the RateLimit value that net/http's header map
// needs a new []string for; an IPv6 client makes one more, its key (the
// /64's text). RateLimit-Policy is shared, made once per route.
func TestHotPathAllocs(t *testing.T) {
	l, err := New(Config{Default: []Policy{{Name: "default", Rule: floodgate.Rule{Limit: 1 << 40, Period: time.Hour}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w := &headerOnly{h: http.Header{}}
	for _, tc := range []struct {
		remote string
		allocs float64
	}{
		{"192.0.2.1:4711", 1},
		{"[2001:db8::1]:4711", 2},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		h.ServeHTTP(w, r)
		if n := testing.AllocsPerRun(1000, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		}); n != tc.allocs {
			t.Errorf("%s: %v allocations per request, want %v", tc.remote, n, tc.allocs)
		}
		if w.h.Get("RateLimit") == "" || w.status != 0 {
			t.Errorf("%s: answered %d with RateLimit %q", tc.remote, w.status, w.h.Get("RateLimit"))
		}
	}
}

// TestRestrictive holds restrictive to its definition, the first of the
// fewest remaining and, among those, the longest ResetAfter, over random
// answers from a few values (so that ties come often), and to the zero
// Decision when no policy is shown.
func TestRestrictive(t *testing.T) {
	if d := restrictive(make([]floodgate.Decision, 3), nil); d != (floodgate.Decision{}) {
		t.Fatalf("no shown policy: %+v", d)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 10_000 {
		each := make([]floodgate.Decision, 1+rng.IntN(8))
		for i := range each {
			each[i] = floodgate.Decision{Limit: int64(i), Remaining: rng.Int64N(3), ResetAfter: time.Duration(rng.IntN(3))}
		}
		shown := rng.Perm(len(each))[:1+rng.IntN(len(each))]
		want := each[shown[0]]
		for _, i := range shown[1:] {
			if d := each[i]; d.Remaining < want.Remaining || d.Remaining == want.Remaining && d.ResetAfter > want.ResetAfter {
				want = d
			}
		}
		if got := restrictive(each, shown); got != want {
			t.Fatalf("restrictive(%+v, %v) = %+v, want %+v", each, shown, got, want)
		}
	}
}
