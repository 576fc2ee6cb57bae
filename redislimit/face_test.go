package redislimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// The tests of httplimit on a Store: each replica is a Store of its own
// and a middleware on it, behind a real HTTP server on loopback, and the
// replicas share one redis-server.

// faceReplica is one replica of a service: its Store, its middleware, and
// its HTTP server, which answers 200 "ok" to what the middleware admits.
type faceReplica struct {
	store *Store
	lim   *httplimit.Limiter
	srv   *httptest.Server
}

func newFaceReplica(t testing.TB, srv *redistest.Server, scfg Config, cfg httplimit.Config) *faceReplica {
	t.Helper()
	if scfg.Timeout == 0 {
		scfg.Timeout = 10 * time.Second // a loaded machine's round trip is no failure of Redis
	}
	st := mustStore(t, srv, scfg)
	cfg.Store = st
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &faceReplica{store: st, lim: lim, srv: hs}
}

// get sends one request for path to the faceReplica, with extra headers in
// pairs, and returns the answer, its body read.
func (r *faceReplica) get(t testing.TB, path string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", r.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func hourly(limit int64) floodgate.Rule { return floodgate.Rule{Limit: limit, Period: time.Hour} }

// TestFaceExactAcrossReplicasEveryAlgorithm: for every algorithm, per
// request and in lease mode, three replicas raced by 48 goroutines over
// real HTTP admit exactly the rule's allowance of one client (in lease
// mode, what a replica still holds when the requests end goes back at
// Close, and Redis then holds the rest exactly), and each answer carries
// the headers of Redis's decision.
func TestFaceExactAcrossReplicasEveryAlgorithm(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range redisAlgorithms {
		for _, lease := range []int64{0, 16} {
			t.Run(fmt.Sprintf("%s/lease=%d", alg, lease), func(t *testing.T) {
				const limit = 40
				prefix := fmt.Sprintf("exact-%s-%d", alg, lease)
				cfg := httplimit.Config{Default: []httplimit.Policy{{Name: "p", Algorithm: alg, Rule: hourly(limit)}}}
				var reps []*faceReplica
				for range 3 {
					// FailClosed and a long Timeout: a loaded machine's slow
					// round trip must not be decided in process, where each
					// replica would apply the rule on its own.
					reps = append(reps, newFaceReplica(t, srv, Config{Prefix: prefix, Lease: Lease{Max: lease},
						FailureMode: FailClosed, Timeout: 10 * time.Second}, cfg))
				}
				var ok, refused atomic.Int64
				var wg sync.WaitGroup
				for g := range 48 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range 3 {
							resp := reps[(g+i)%3].get(t, "/x")
							switch resp.StatusCode {
							case 200:
								ok.Add(1)
								if !strings.HasPrefix(resp.Header.Get("RateLimit"), `"p";r=`) {
									t.Errorf("200 without the RateLimit header: %v", resp.Header)
								}
							case 429:
								refused.Add(1)
								if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
									t.Errorf("429 with Retry-After %q", resp.Header.Get("Retry-After"))
								}
							default:
								t.Errorf("status %d", resp.StatusCode)
							}
						}
					}()
				}
				wg.Wait()
				for _, r := range reps {
					if st := storeStats(r.store); st.Fallbacks != 0 {
						t.Fatalf("Redis failed: %+v", st)
					}
				}
				if got := ok.Load(); got > limit || lease == 0 && got != limit {
					t.Fatalf("%d admitted across three replicas, %d refused: the rule allows %d", got, refused.Load(), limit)
				}
				if got := reps[0].get(t, "/x").Header.Get("RateLimit-Policy"); got != `"p";q=40;w=3600` {
					t.Errorf("RateLimit-Policy %q", got)
				}
				if lease == 0 || ok.Load() == limit {
					return
				}
				// In lease mode the last units may sit in the lease of a
				// replica whose requests had all been served: none is lost,
				// and once every replica gives its lease back Redis holds
				// exactly what was not admitted.
				p := onlyPolicy(t, reps[0].store)
				for _, r := range reps {
					if err := r.lim.Close(); err != nil {
						t.Fatal(err)
					}
				}
				d, err := p.Peek(context.Background(), "127.0.0.1")
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d admitted; %d went back from the leases at Close", ok.Load(), d.Remaining+1)
				if left := d.Remaining + 1; !d.Allowed || ok.Load()+left != limit {
					t.Fatalf("%d admitted across three replicas, and Redis holds %+v after every lease went back: the rule allows %d", ok.Load(), d, limit)
				}
			})
		}
	}
}

// TestFaceAllOrNothing: a route of two policies on Redis refuses by the
// stricter, and its refusal charges the other nothing, as another
// faceReplica sees it: one round trip a request.
func TestFaceAllOrNothing(t *testing.T) {
	srv := redistest.Start(t)
	cfg := httplimit.Config{Routes: []httplimit.Route{{Pattern: "/api/", Policies: []httplimit.Policy{
		{Name: "wide", Rule: hourly(10)},
		{Name: "narrow", Algorithm: floodgate.FixedWindow, Rule: hourly(3)},
	}}}}
	a := newFaceReplica(t, srv, Config{Prefix: "aon"}, cfg)
	b := newFaceReplica(t, srv, Config{Prefix: "aon"}, cfg)
	for i := range 8 {
		resp := []*faceReplica{a, b}[i%2].get(t, "/api/x")
		if want := map[bool]int{true: 200, false: 429}[i < 3]; resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
		if i == 4 {
			// Each policy says what it would answer to one request now,
			// as in process: wide holds 7, and would leave 6.
			if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"wide";r=6;`) {
				t.Errorf("a refusal's RateLimit %q: wide should still hold 7", got)
			}
		}
	}
	// The wide policy was charged 3 times, by the three admissions: a
	// third faceReplica, on its own Store, finds 7 left (6 after this one).
	c := newFaceReplica(t, srv, Config{Prefix: "aon"}, httplimit.Config{Routes: []httplimit.Route{{Pattern: "/api/", Policies: []httplimit.Policy{
		{Name: "wide", Rule: hourly(10)}}}}})
	resp := c.get(t, "/api/x")
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"wide";r=6;`) {
		t.Fatalf("after 3 admissions and 5 refusals, the wide policy answers %q: a refusal charged it", got)
	}
	for _, r := range []*faceReplica{a, b} {
		if st := storeStats(r.store); st.Calls != 4 {
			t.Errorf("4 requests, %d round trips", st.Calls)
		}
	}
}

// TestFaceRoutesTiersExemptKeyProxy: on Redis, routes and tiers keep
// state apart, an exemption is charged nothing, Config.Key keys the
// request, and a trusted proxy's header names the client.
func TestFaceRoutesTiersExemptKeyProxy(t *testing.T) {
	srv := redistest.Start(t)
	cfg := httplimit.Config{
		Routes: []httplimit.Route{
			{Pattern: "/a/", Policies: []httplimit.Policy{{Name: "a", Rule: hourly(2)}},
				Tiers: map[string][]httplimit.Policy{"gold": {{Name: "a", Rule: hourly(4)}}}},
			{Pattern: "/b/", Policies: []httplimit.Policy{{Name: "b", Rule: hourly(1)}}},
		},
		TrustedProxies: []string{"127.0.0.1/32"},
		Tier: func(r *http.Request, _ string) string {
			if r.Header.Get("X-Test-Tier") == "gold" {
				return "gold"
			}
			return ""
		},
		Exempt: func(r *http.Request) bool { return r.URL.Query().Get("health") == "1" },
		Key: func(r *http.Request, client string) string {
			if u := r.Header.Get("X-Test-User"); u != "" {
				return "user:" + u
			}
			return client
		},
	}
	a := newFaceReplica(t, srv, Config{Prefix: "faces"}, cfg)
	b := newFaceReplica(t, srv, Config{Prefix: "faces"}, cfg)
	count := func(path string, n int, hdr ...string) (ok int) {
		for i := range n {
			if []*faceReplica{a, b}[i%2].get(t, path, hdr...).StatusCode == 200 {
				ok++
			}
		}
		return ok
	}
	if got := count("/a/x", 5, "X-Forwarded-For", "203.0.113.1"); got != 2 {
		t.Errorf("route /a/, a client behind the proxy: %d admitted of 2", got)
	}
	if got := count("/a/x", 5, "X-Forwarded-For", "203.0.113.2"); got != 2 {
		t.Errorf("route /a/, another client behind the proxy: %d admitted of 2 (its own state)", got)
	}
	if got := count("/b/x", 3, "X-Forwarded-For", "203.0.113.1"); got != 1 {
		t.Errorf("route /b/: %d admitted of 1 (a route's state is its own)", got)
	}
	if got := count("/a/x", 6, "X-Forwarded-For", "203.0.113.1", "X-Test-Tier", "gold"); got != 4 {
		t.Errorf("tier gold: %d admitted of 4 (a tier's state is its own)", got)
	}
	if got := count("/a/x?health=1", 5, "X-Forwarded-For", "203.0.113.1"); got != 5 {
		t.Errorf("exempt: %d admitted of 5", got)
	}
	if got := count("/a/x", 3, "X-Test-User", "alice"); got != 2 {
		t.Errorf("Key: user alice, %d admitted of 2", got)
	}
	if got := count("/a/x", 3, "X-Test-User", "bob"); got != 2 {
		t.Errorf("Key: user bob, %d admitted of 2", got)
	}
	var exempt int64
	for _, s := range a.lim.AppendCounts(nil) {
		if s.Metric == counts.Requests && s.Label == countinfo.Exempt && s.Route == "/a/" {
			exempt = s.Value
		}
	}
	if exempt != 3 {
		t.Errorf("faceReplica a counted %d exempt, want 3 of the 5", exempt)
	}
}

// TestFaceShadow: a shadow policy on Redis refuses nothing and counts
// what it would refuse; the enforced policy is charged, the shadow not,
// for a request it refuses. Config.Shadow makes every policy a shadow.
func TestFaceShadow(t *testing.T) {
	srv := redistest.Start(t)
	cfg := httplimit.Config{Default: []httplimit.Policy{
		{Name: "enforced", Rule: hourly(5)},
		{Name: "trial", Rule: hourly(2), Shadow: true},
	}}
	a := newFaceReplica(t, srv, Config{Prefix: "shadow"}, cfg)
	for i := range 5 {
		if code := a.get(t, "/").StatusCode; code != 200 {
			t.Fatalf("request %d: %d: a shadow refused", i, code)
		}
	}
	if code := a.get(t, "/").StatusCode; code != 429 {
		t.Fatalf("the sixth request: %d, the enforced rule allows 5", code)
	}
	got := map[string]int64{}
	for _, s := range a.lim.AppendCounts(nil) {
		if s.Metric == counts.Requests {
			got[s.Policy+"/"+s.Label] += s.Value
		}
	}
	if got["/allowed"] != 2 || got["trial/shadow_denied"] != 3 || got["enforced/denied"] != 1 {
		t.Errorf("counts %v: want 2 allowed, 3 shadow_denied by trial, 1 denied by enforced", got)
	}
	all := newFaceReplica(t, srv, Config{Prefix: "shadow-all"}, httplimit.Config{Shadow: true,
		Default: []httplimit.Policy{{Name: "p", Rule: hourly(1)}}})
	for i := range 3 {
		if code := all.get(t, "/").StatusCode; code != 200 {
			t.Fatalf("Config.Shadow, request %d: %d", i, code)
		}
	}
}

// TestFaceSetRoutesGainsNothing: SetRoutes on a Store changes a kept
// policy's rule by SetRule: a client holds at most what it held, and at
// most the new capacity (for a window, the new limit less what it
// spent).
func TestFaceSetRoutesGainsNothing(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			policies := func(limit int64) []httplimit.Policy {
				return []httplimit.Policy{{Name: "p", Algorithm: alg, Rule: hourly(limit)}}
			}
			a := newFaceReplica(t, srv, Config{Prefix: "setroutes-" + alg}, httplimit.Config{Default: policies(10)})
			for range 4 {
				a.get(t, "/")
			}
			// 6 held: a lower limit of 5 leaves a bucket 5, and a
			// window 1 (it spent 4 of 5); a larger one leaves what is
			// held then.
			lower := int64(5)
			if alg != floodgate.TokenBucket && alg != floodgate.LeakyBucket {
				lower = 1
			}
			for _, c := range []struct{ limit, want int64 }{{5, lower}, {100, 0}} {
				if err := a.lim.SetRoutes(nil, policies(c.limit)); err != nil {
					t.Fatal(err)
				}
				ok := int64(0)
				for range 8 {
					if a.get(t, "/").StatusCode == 200 {
						ok++
					}
				}
				if ok != c.want {
					t.Fatalf("after SetRoutes to %d an hour: %d admitted, want %d", c.limit, ok, c.want)
				}
			}
		})
	}
}

// TestFaceFailureModes: with Redis away, each FailureMode answers as it
// says, with headers, and the Store counts how.
func TestFaceFailureModes(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailClosed, FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			a := newFaceReplica(t, srv, Config{Prefix: "fail", FailureMode: mode, Timeout: 200 * time.Millisecond, ProbeEvery: time.Hour},
				httplimit.Config{Default: []httplimit.Policy{{Name: "p", Rule: hourly(3)}, {Name: "q", Rule: hourly(30)}}})
			srv.Kill()
			var codes []int
			for range 5 {
				resp := a.get(t, "/")
				codes = append(codes, resp.StatusCode)
				if resp.Header.Get("RateLimit") == "" {
					t.Errorf("%v: no RateLimit header", mode)
				}
				if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
					t.Errorf("%v: a 429 without Retry-After", mode)
				}
			}
			want := map[FailureMode]string{FailOpen: "[200 200 200 200 200]", FailClosed: "[429 429 429 429 429]", FailLocal: "[200 200 200 429 429]"}[mode]
			if got := fmt.Sprint(codes); got != want {
				t.Fatalf("%v with Redis away: %s, want %s", mode, got, want)
			}
			label := map[FailureMode]string{FailOpen: countinfo.FailOpen, FailClosed: countinfo.FailClosed, FailLocal: countinfo.FailLocal}[mode]
			var n int64
			for _, s := range a.store.AppendCounts(nil) {
				if s.Metric == counts.Requests && s.Label == label {
					n = s.Value
				}
			}
			if n != 5 {
				t.Errorf("the Store counted %d %s, want 5", n, label)
			}
		})
	}
}

// TestFaceCloseReturnsLeases: in lease mode, what a faceReplica leased and
// did not spend goes back to Redis at Close, so that another faceReplica then
// finds the whole allowance but what was admitted.
func TestFaceCloseReturnsLeases(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range redisAlgorithms {
		t.Run(alg, func(t *testing.T) {
			const limit = 1000
			cfg := httplimit.Config{Default: []httplimit.Policy{{Name: "p", Algorithm: alg, Rule: hourly(limit)}}}
			a := newFaceReplica(t, srv, Config{Prefix: "close-" + alg, Lease: Lease{Max: 64}}, cfg)
			for range 20 {
				if code := a.get(t, "/").StatusCode; code != 200 {
					t.Fatalf("status %d", code)
				}
			}
			p := onlyPolicy(t, a.store)
			if err := a.lim.Close(); err != nil {
				t.Fatal(err)
			}
			if st := a.store.Stats(); st.Leased == 0 {
				t.Fatalf("nothing was leased: %+v", st)
			}
			d, err := p.Peek(context.Background(), "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != limit-20-1 {
				t.Fatalf("after 20 admitted and Close, Redis has %d left (after a peeked request), want %d: %+v", d.Remaining, limit-20-1, a.store.Stats())
			}
		})
	}
}

// onlyPolicy is the one live policy of s.
func onlyPolicy(t testing.TB, s *Store) *policy {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) != 1 {
		t.Fatalf("%d live policies", len(s.live))
	}
	for _, p := range s.live {
		return p
	}
	return nil
}

// TestFaceLeaseTwoPolicies: in lease mode a route of two policies is
// exact across replicas, and once the client's leases are in place its
// requests make no round trip.
func TestFaceLeaseTwoPolicies(t *testing.T) {
	srv := redistest.Start(t)
	cfg := httplimit.Config{Default: []httplimit.Policy{
		{Name: "counter", Algorithm: floodgate.SlidingCounter, Rule: hourly(1000)},
		{Name: "hour", Rule: hourly(300)},
	}}
	// Leases of an hour, and windows of an hour: with a second's TTL, a
	// run that a loaded machine spread over most of one renews them for
	// time, and a window's batch ends with its window, in round trips the
	// count below would take for the requests'.
	scfg := Config{Prefix: "lease2", Lease: Lease{Max: 64, TTL: time.Hour}, FailureMode: FailClosed}
	var reps []*faceReplica
	for range 3 {
		r := newFaceReplica(t, srv, scfg, cfg)
		for _, p := range r.store.live {
			p.s.lease.inline = true // renewals at once, on the request's goroutine
		}
		reps = append(reps, r)
	}
	// Steady state first: one replica, one client, well within the rule.
	a := reps[0]
	for range 10 {
		a.get(t, "/")
	}
	before := storeStats(a.store).Calls
	for range 20 {
		if code := a.get(t, "/").StatusCode; code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if calls := storeStats(a.store).Calls - before; calls > 2 {
		t.Errorf("20 requests served from leases made %d round trips", calls)
	}
	// Then all three race to the hourly limit: exactly 300 in all.
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if reps[(g+i)%3].get(t, "/").StatusCode == 200 {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := ok.Load() + 30; got != 300 {
		t.Fatalf("%d admitted in all, the hourly rule allows 300", got)
	}
}

// TestFaceRotatingClients: a client that rotates its address against a
// Redis-backed route costs Redis one key per address per policy, which
// expires with the rule's window, and the replica's lease state stays
// within Lease.MaxKeys.
func TestFaceRotatingClients(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	a := newFaceReplica(t, srv, Config{Prefix: "rotate", Lease: Lease{Max: 16, MaxKeys: 100}},
		httplimit.Config{TrustedProxies: []string{"127.0.0.1/32"},
			Default: []httplimit.Policy{{Name: "p", Rule: floodgate.Rule{Limit: 10, Period: 10 * time.Second}}}})
	for i := range 500 {
		a.get(t, "/", "X-Forwarded-For", fmt.Sprintf("198.51.%d.%d", i/250, i%250))
	}
	p := onlyPolicy(t, a.store)
	if n := p.s.lease.size.Load(); n > 100 {
		t.Errorf("%d clients' lease states held, Lease.MaxKeys is 100", n)
	}
	keys, err := c.Keys(context.Background(), "rotate:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 500 {
		t.Errorf("%d keys in Redis for 500 clients", len(keys))
	}
	mem, err := c.MemoryUsage(context.Background(), keys[0]).Result()
	if err != nil || mem > 200 {
		t.Errorf("a key takes %d bytes (%v), more than the 200 the docs state", mem, err)
	}
	t.Logf("a client of a token-bucket policy costs Redis %d bytes", mem)
	ttl, err := c.PTTL(context.Background(), keys[0]).Result()
	if err != nil || ttl <= 0 || ttl > 11*time.Second+time.Second {
		t.Errorf("a key's TTL is %v (%v): it should end about a second after the key is full again", ttl, err)
	}
}

// TestFaceCallerDeadline: a request whose context ends before Redis
// answers is refused, opens no breaker and charges nothing: its client
// gains nothing by short deadlines, and the others lose nothing.
func TestFaceCallerDeadline(t *testing.T) {
	srv := redistest.Start(t)
	st := mustStore(t, srv, Config{Prefix: "deadline", BreakAfter: 1})
	lim, err := httplimit.New(httplimit.Config{Store: st, Default: []httplimit.Policy{
		{Name: "p", Rule: hourly(5)}, {Name: "q", Rule: hourly(50)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 429 {
			t.Fatalf("a request whose caller gave up: %d", w.Code)
		}
	}
	ok := 0
	for range 8 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code == 200 {
			ok++
		}
	}
	s := storeStats(st)
	if ok != 5 || s.Opens != 0 || s.Fallbacks != 0 {
		t.Fatalf("after 20 abandoned requests: %d of 5 admitted, %+v", ok, s)
	}
}

// TestFaceScriptFlush: Redis losing its scripts mid-run (SCRIPT FLUSH, as
// after a restart or a failover) costs a reload, and no decision.
func TestFaceScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	a := newFaceReplica(t, srv, Config{Prefix: "flush", FailureMode: FailClosed},
		httplimit.Config{Default: []httplimit.Policy{{Name: "p", Rule: hourly(10)}, {Name: "q", Algorithm: floodgate.SlidingLog, Rule: hourly(10)}}})
	ok := 0
	for i := range 14 {
		if i%3 == 0 {
			if err := c.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if a.get(t, "/").StatusCode == 200 {
			ok++
		}
	}
	s := storeStats(a.store)
	if ok != 10 || s.Fallbacks != 0 || s.Loads < 5 {
		t.Fatalf("%d admitted of 10 across script flushes: %+v", ok, s)
	}
}

// TestFaceSlowAndRestartedRedis: a paused Redis (slow: it answers nothing
// within Timeout) has each request decided by the FailureMode, counted as
// a timeout; a restarted one (empty, without its scripts) is back at the
// next request, which loads the script again; nothing is admitted twice.
func TestFaceSlowAndRestartedRedis(t *testing.T) {
	srv := redistest.Start(t)
	a := newFaceReplica(t, srv, Config{Prefix: "slow", FailureMode: FailClosed, Timeout: 50 * time.Millisecond, BreakAfter: 100},
		httplimit.Config{Default: []httplimit.Policy{{Name: "p", Rule: hourly(4)}, {Name: "q", Rule: hourly(40)}}})
	if code := a.get(t, "/").StatusCode; code != 200 {
		t.Fatalf("status %d", code)
	}
	srv.Pause()
	for range 3 {
		if code := a.get(t, "/").StatusCode; code != 429 {
			srv.Resume()
			t.Fatalf("FailClosed with Redis paused: %d", code)
		}
	}
	srv.Resume()
	s := storeStats(a.store)
	if s.Timeouts < 3 || s.Fallbacks != 3 {
		t.Fatalf("3 requests while Redis was paused: %+v", s)
	}
	// The round trips that timed out may have charged (Redis ran them
	// once it resumed): never twice, so at most 3 more are admitted.
	ok := 0
	for range 6 {
		if a.get(t, "/").StatusCode == 200 {
			ok++
		}
	}
	if ok > 3 {
		t.Fatalf("%d admitted after the pause; 1 was before it, and the rule allows 4", ok)
	}
	srv.Restart() // empty: the client's state and the scripts are gone
	before := storeStats(a.store)
	ok = 0
	for range 8 {
		if a.get(t, "/").StatusCode == 200 {
			ok++
		}
	}
	// A connection the restart broke may fail one request (FailClosed).
	after := storeStats(a.store)
	if failed := after.Fallbacks - before.Fallbacks; ok > 4 || ok < min(4, 8-int(failed)) || after.Loads == before.Loads {
		t.Fatalf("%d admitted after a restart that lost every key, want 4: %+v", ok, after)
	}
}

// TestFaceHeadersFromRedis: the RateLimit headers and Retry-After come
// from Redis's decision, to the second: a token bucket of 1 an hour, once
// spent, waits an hour less the few milliseconds since, which rounds up
// to 3600; a fixed window of 3 an hour says what its window holds.
func TestFaceHeadersFromRedis(t *testing.T) {
	srv := redistest.Start(t)
	a := newFaceReplica(t, srv, Config{Prefix: "headers"}, httplimit.Config{Routes: []httplimit.Route{
		{Pattern: "/b/", Policies: []httplimit.Policy{{Name: "b", Rule: hourly(1)}}},
		{Pattern: "/w/", Policies: []httplimit.Policy{{Name: "w", Algorithm: floodgate.FixedWindow, Rule: hourly(3)}}},
	}})
	first := a.get(t, "/b/x")
	if got := first.Header.Get("RateLimit"); first.StatusCode != 200 || got != `"b";r=0;t=3600` {
		t.Fatalf("first request: %d, RateLimit %q", first.StatusCode, got)
	}
	second := a.get(t, "/b/x")
	if second.StatusCode != 429 || second.Header.Get("Retry-After") != "3600" || second.Header.Get("RateLimit-Policy") != `"b";q=1;w=3600` {
		t.Fatalf("second request: %d, %v", second.StatusCode, second.Header)
	}
	for i := range 4 {
		resp := a.get(t, "/w/x")
		r := resp.Header.Get("RateLimit")
		if i < 3 && (resp.StatusCode != 200 || !strings.HasPrefix(r, fmt.Sprintf(`"w";r=%d;t=`, 2-i))) {
			t.Fatalf("window request %d: %d, RateLimit %q", i, resp.StatusCode, r)
		}
		if i == 3 {
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if resp.StatusCode != 429 || err != nil || ra < 1 || ra > 3600 {
				t.Fatalf("the fourth: %d, %v", resp.StatusCode, resp.Header)
			}
			// The window's end, to the second, as Redis's clock says.
			now, err := client(t, srv).Time(context.Background()).Result()
			if err != nil {
				t.Fatal(err)
			}
			end := now.Truncate(time.Hour).Add(time.Hour)
			if want := int(end.Sub(now).Seconds()) + 1; ra != want && ra != want-1 {
				t.Fatalf("Retry-After %d, the window ends in %v", ra, end.Sub(now))
			}
		}
	}
}

// TestFaceShortDeadlines: requests whose contexts end 10 µs to 1 ms
// after they begin (a handler timeout, a client gone mid-round-trip),
// 400 of them from 8 goroutines, on a Store whose breaker opens at the first failure:
// no breaker opens and nothing falls back; the deadline client is never
// admitted past its rule; a client racing them gets exactly its own
// allowance, and one after them too: the connections the deadlines cut
// are not reused half-read.
func TestFaceShortDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	const limit = 20
	st := mustStore(t, srv, Config{Prefix: "short", BreakAfter: 1, Timeout: 10 * time.Second})
	lim, err := httplimit.New(httplimit.Config{Store: st, Default: []httplimit.Policy{
		{Name: "p", Rule: hourly(limit)}, {Name: "q", Rule: hourly(10 * limit)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	ask := func(ctx context.Context, addr string) int {
		req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		req.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	var hurried, racer atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(10+i*i*37%990)*time.Microsecond)
				if ask(ctx, "192.0.2.1:1000") == 200 {
					hurried.Add(1)
				}
				cancel()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 2 * limit {
			if ask(context.Background(), "192.0.2.2:1000") == 200 {
				racer.Add(1)
			}
		}
	}()
	wg.Wait()
	after := 0
	for range 2 * limit {
		if ask(context.Background(), "192.0.2.3:1000") == 200 {
			after++
		}
	}
	s := storeStats(st)
	if s.Opens != 0 || s.Fallbacks != 0 {
		t.Fatalf("deadlines opened the breaker or fell back: %+v", s)
	}
	if hurried.Load() > limit {
		t.Fatalf("the deadline client was admitted %d times, rule %d", hurried.Load(), limit)
	}
	if racer.Load() != limit || after != limit {
		t.Fatalf("the racing client was admitted %d, the one after %d; want %d each", racer.Load(), after, limit)
	}
	t.Logf("deadline client: %d admitted of 400; %d abandoned", hurried.Load(), s.Abandoned)
}

// TestFacePathFormsOnStore: on a Store, a path whose escapes change its
// segments ("/api%2Fx") is charged under the routes of both its forms,
// in a round trip for each, and the forms that clean to a route's path
// ("/api//x", "/api/./x", "/api/x/../y") count under it: across two
// replicas, over real HTTP, no form gets the api route past its rule.
func TestFacePathFormsOnStore(t *testing.T) {
	srv := redistest.Start(t)
	cfg := httplimit.Config{Routes: []httplimit.Route{
		{Pattern: "/api/", Policies: []httplimit.Policy{{Name: "api", Rule: hourly(4)}}},
		{Pattern: "/", Policies: []httplimit.Policy{{Name: "rest", Rule: hourly(100)}}},
	}}
	a := newFaceReplica(t, srv, Config{Prefix: "forms"}, cfg)
	b := newFaceReplica(t, srv, Config{Prefix: "forms"}, cfg)
	before := storeStats(a.store).Calls + storeStats(b.store).Calls
	resp := a.get(t, "/api%2Fx")
	if got := resp.Header.Get("RateLimit-Policy"); got != `"api";q=4;w=3600, "rest";q=100;w=3600` {
		t.Fatalf("RateLimit-Policy %q: want both routes' policies", got)
	}
	if got := resp.Header.Get("RateLimit"); got != `"api";r=3;t=900, "rest";r=99;t=36` {
		t.Fatalf("RateLimit %q", got)
	}
	if calls := storeStats(a.store).Calls + storeStats(b.store).Calls - before; calls != 2 {
		t.Fatalf("a request under two routes made %d round trips, want one per route", calls)
	}
	ok := 1
	for i, p := range []string{"/api%2Fy", "/api//x", "/api/./x", "/api/x/../y", "/api%2F..%2Fapi/z", "/api/z", "/api%2Fw"} {
		if []*faceReplica{b, a}[i%2].get(t, p).StatusCode == 200 {
			ok++
		}
	}
	if ok != 4 {
		t.Fatalf("the api route admitted %d across its forms, rule 4", ok)
	}
	if got := a.get(t, "/other").StatusCode; got != 200 {
		t.Fatalf("the rest route answered %d: the api forms spent it", got)
	}
}

// TestFaceInFlightAcrossReplicas: httplimit's in-flight policy on a Store
// holds across replicas: with one request of the client held in replica
// a, replica b refuses the next with a 429 and Retry-After, and charges
// the route's rate policy nothing; once the held request ends, b serves.
func TestFaceInFlightAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	policies := []httplimit.Policy{{Name: "conc", InFlight: 1}, {Name: "rate", Rule: hourly(3)}}
	newReplica := func() *faceReplica {
		st := mustStore(t, srv, Config{Prefix: "inflight"})
		lim, err := httplimit.New(httplimit.Config{Store: st, Routes: []httplimit.Route{{Pattern: "/", Policies: policies}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		hs := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				entered <- struct{}{}
				<-release
			}
			io.WriteString(w, "ok")
		})))
		t.Cleanup(hs.Close)
		return &faceReplica{store: st, lim: lim, srv: hs}
	}
	a, b := newReplica(), newReplica()
	done := make(chan int, 1)
	go func() {
		resp, err := a.srv.Client().Get(a.srv.URL + "/hold")
		if err != nil {
			t.Error(err)
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	for range 4 {
		resp := b.get(t, "/")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("while a holds the client's one slot, b answered %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the held request: %d", code)
	}
	// The four refusals charged no rate: 2 of its 3 are left.
	for i := range 2 {
		if resp := b.get(t, "/"); resp.StatusCode != 200 {
			t.Fatalf("request %d after the hold: %d", i, resp.StatusCode)
		}
	}
	if resp := b.get(t, "/"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("RateLimit") == "" {
		t.Fatalf("the rate's refusal: %d, RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if a.store.Stats().SlotsHeld != 0 || b.store.Stats().SlotsHeld != 0 {
		t.Errorf("slots held at the end: %d, %d", a.store.Stats().SlotsHeld, b.store.Stats().SlotsHeld)
	}
}
