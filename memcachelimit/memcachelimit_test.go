package memcachelimit

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/memcachetest"
)

// algorithms are floodgate's five built-in algorithms.
var algorithms = []string{floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow, floodgate.SlidingCounter, floodgate.SlidingLog}

// t0 is the tests' first instant: a Unix time, as the wall clock's.
const t0 = int64(1_800_000_000) * int64(time.Second)

// mustPolicy makes a policy of s, or fails t.
func mustPolicy(t testing.TB, s *Store, name, alg string, rule floodgate.Rule) floodgate.StorePolicy {
	t.Helper()
	p, err := s.Policy(name, alg, rule)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// allow decides one request of 1 for key by p on s.
func allow(t testing.TB, s *Store, p floodgate.StorePolicy, key string) floodgate.Decision {
	t.Helper()
	d, _, err := s.Decide(context.Background(), []floodgate.Ask{{Policy: p, Key: key, N: 1}}, nil)
	if err != nil {
		t.Fatalf("Decide(%.40q): %v", key, err)
	}
	return d
}

// drain counts the requests of 1 that key admits, up to limit+1 tries.
func drain(t testing.TB, s *Store, p floodgate.StorePolicy, key string, limit int) int {
	t.Helper()
	n := 0
	for range limit + 1 {
		if allow(t, s, p, key).Allowed {
			n++
		}
	}
	return n
}

// TestKeys: keys memcached cannot hold as they are (4 KB long, with
// spaces, newlines, NUL, DEL, or differing only past byte 250), and a
// policy's name and key that would run into each other, are each
// limited apart: each admits exactly its limit, whatever the others
// took.
func TestKeys(t *testing.T) {
	srv := memcachetest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Config{Clock: floodgate.NewManualClock(t0), FailureMode: FailError})
	const limit = 3
	rule := floodgate.Rule{Limit: limit, Period: time.Hour}
	long := strings.Repeat("k", 4096)
	past := strings.Repeat("p", 260)
	keys := []string{"plain", "", long, long + "x", long[:250], long[:251], "with space", "with\nnewline", "with\r\nCRLF",
		"nul\x00", "nul\x00\x00", "del\x7f", "tab\t", "ütf-8 ✓", "\xff\xfe", past + "a", past + "b", past[:250] + "a", past[:250] + "b"}
	p := mustPolicy(t, s, "keys", floodgate.FixedWindow, rule)
	for _, k := range keys {
		if got := drain(t, s, p, k, limit); got != limit {
			t.Errorf("key %.60q (%d bytes): %d admitted; want %d, apart from the other keys", k, len(k), got, limit)
		}
	}
	// A name and a key that concatenate alike.
	a := mustPolicy(t, s, "a", floodgate.FixedWindow, rule)
	ab := mustPolicy(t, s, "ab", floodgate.FixedWindow, rule)
	if got := drain(t, s, a, "bc", limit); got != limit {
		t.Errorf(`policy "a", key "bc": %d admitted; want %d`, got, limit)
	}
	if got := drain(t, s, ab, "c", limit); got != limit {
		t.Errorf(`policy "ab", key "c": %d admitted; want %d, apart from policy "a", key "bc"`, got, limit)
	}
	// Every key memcached is sent is one it takes, and they are apart.
	seen := map[string]string{}
	for _, name := range []string{"keys", "a", "ab", "a name with spaces", strings.Repeat("n", 300)} {
		head := keyHead(s.set.prefix, floodgate.FixedWindow, name)
		for _, k := range keys {
			mk := itemKey(s.set.prefix, head, k)
			if !legalKey(mk) {
				t.Errorf("policy %.20q, key %.40q: memcached key %q is not legal", name, k, mk)
			}
			if prev, ok := seen[mk]; ok {
				t.Errorf("policy %.20q, key %.40q: memcached key %q is also %s's", name, k, mk, prev)
			}
			seen[mk] = fmt.Sprintf("%.20q/%.40q", name, k)
		}
	}
}

// offsetClock reads another clock, offset by d.
type offsetClock struct {
	c *floodgate.ManualClock
	d int64
}

func (o offsetClock) Now() int64 { return o.c.Now() + o.d }

// TestSkew: two replicas on one memcached, one's clock ahead of the
// other's by δ, saturate one key over several periods, taking turns. In
// any interval of true time [t1, t2], a token bucket of Limit L a
// Period P admits at most L + L×(t2−t1+δ)/P (its burst, its rate, and
// what the skew costs: L×δ/P early); with δ = 0, the exact rule. A
// fixed window admits at most L in the true times that both replicas
// agree are one window, [kP, (k+1)P−δ), and exactly L in each window
// with δ = 0.
func TestSkew(t *testing.T) {
	srv := memcachetest.Start(t)
	const L = 20
	const P = int64(time.Second)
	for _, alg := range []string{floodgate.TokenBucket, floodgate.FixedWindow} {
		for _, delta := range []int64{0, P / 10, P / 2} {
			t.Run(fmt.Sprintf("%s/δ=%v", alg, time.Duration(delta)), func(t *testing.T) {
				truth := floodgate.NewManualClock(t0)
				c := newClient(t, srv.Addr())
				behind := newStore(t, c, Config{Prefix: "skew:", Clock: truth, FailureMode: FailError})
				ahead := newStore(t, c, Config{Prefix: "skew:", Clock: offsetClock{truth, delta}, FailureMode: FailError})
				name := fmt.Sprintf("skew-%s-%d", alg, delta)
				rule := floodgate.Rule{Limit: L, Period: time.Duration(P)}
				stores := []*Store{behind, ahead}
				ps := []floodgate.StorePolicy{mustPolicy(t, behind, name, alg, rule), mustPolicy(t, ahead, name, alg, rule)}
				var at []int64 // the true instants of the admissions
				const step = P / 100
				const periods = 5
				for truth.Now() < t0+periods*P {
					for i := range stores {
						for allow(t, stores[i], ps[i], "k").Allowed {
							at = append(at, truth.Now()-t0)
						}
					}
					truth.Advance(time.Duration(step))
				}
				switch alg {
				case floodgate.TokenBucket:
					for i := range at {
						for j := i; j < len(at); j++ {
							bound := L + L*(at[j]-at[i]+delta)/P
							if n := j - i + 1; n > int(bound) {
								t.Fatalf("%d admitted in [%v, %v]; the rule with a skew of %v allows %d", n,
									time.Duration(at[i]), time.Duration(at[j]), time.Duration(delta), bound)
							}
						}
					}
					if delta == 0 {
						// The rule exactly: its burst and one a step of P/L
						// at the instants the test reads.
						want := L + int(L*(periods*P-step)/P)
						if len(at) != want {
							t.Errorf("%d admitted over %d periods with no skew; want %d", len(at), periods, want)
						}
					}
				case floodgate.FixedWindow:
					for k := int64(0); k < periods; k++ {
						n := 0
						for _, a := range at {
							if a >= k*P && a < (k+1)*P-delta {
								n++
							}
						}
						if n > L {
							t.Errorf("%d admitted in the window [%v, %v) that both replicas agree on; want at most %d", n,
								time.Duration(k*P), time.Duration((k+1)*P-delta), L)
						}
						if delta == 0 && n != L {
							t.Errorf("%d admitted in the window [%v, %v) with no skew; want %d", n, time.Duration(k*P), time.Duration((k+1)*P), L)
						}
					}
				}
				t.Logf("%d admitted over %d periods of %d, δ %v", len(at), periods, L, time.Duration(delta))
			})
		}
	}
}

// TestExactAcrossReplicas: four replicas, each with its own client, 64
// goroutines, 2,560 requests for one key of a limit of 500 an hour,
// the clock frozen: exactly 500 pass, for every algorithm.
func TestExactAcrossReplicas(t *testing.T) {
	srv := memcachetest.Start(t)
	const replicas, goroutines, requests, limit = 4, 64, 2560, 500
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			clock := floodgate.NewManualClock(t0)
			var stores [replicas]*Store
			var ps [replicas]floodgate.StorePolicy
			for i := range stores {
				stores[i] = newStore(t, newClient(t, srv.Addr()), Config{Prefix: "exact:", Clock: clock, FailureMode: FailError})
				ps[i] = mustPolicy(t, stores[i], "exact-"+alg, alg, floodgate.Rule{Limit: limit, Period: time.Hour})
			}
			var admitted, next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, p := stores[g%replicas], ps[g%replicas]
					for next.Add(1) <= requests {
						d, _, err := s.Decide(context.Background(), []floodgate.Ask{{Policy: p, Key: "hot", N: 1}}, nil)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if got := admitted.Load(); got != limit {
				t.Errorf("%d of %d requests admitted across %d replicas and %d goroutines; want exactly %d", got, requests, replicas, goroutines, limit)
			}
			var conflicts int64
			for _, s := range stores {
				conflicts += s.Stats().CASConflicts
			}
			t.Logf("%s: %d admitted, %d CAS conflicts", alg, admitted.Load(), conflicts)
		})
	}
}

// TestRestart: memcached restarted mid-run forgets every count: a key
// that had spent its window admits exactly one window's Limit again,
// the cost the package's doc names, and no more.
func TestRestart(t *testing.T) {
	srv := memcachetest.Start(t)
	const limit = 10
	s := newStore(t, newClient(t, srv.Addr()), Config{Clock: floodgate.NewManualClock(t0), FailureMode: FailError, BreakAfter: 1 << 30})
	p := mustPolicy(t, s, "restart", floodgate.FixedWindow, floodgate.Rule{Limit: limit, Period: time.Hour})
	if got := drain(t, s, p, "k", limit); got != limit {
		t.Fatalf("before the restart: %d admitted; want %d", got, limit)
	}
	srv.Restart()
	// The client's pooled connections broke with the server: the calls
	// on them fail (with FailError, an error) until it dials again.
	deadline := time.Now().Add(30 * time.Second)
	admitted := 0
	for {
		d, _, err := s.Decide(context.Background(), []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil)
		if err == nil {
			if d.Allowed {
				admitted++
			}
			break
		}
		if !errors.Is(err, floodgate.ErrUnreached) {
			t.Fatalf("after the restart: %v; want an error that wraps ErrUnreached", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("memcached not reached 30 s after its restart: %v", err)
		}
	}
	admitted += drain(t, s, p, "k", limit)
	if admitted != limit {
		t.Errorf("after the restart: %d admitted; want %d, one fresh window (the counts were lost)", admitted, limit)
	}
}

// TestImports: the package's own code imports no internal package of
// floodgate's: it is a backend written on the exported kit alone.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") {
				t.Errorf("%s imports %s: memcachelimit builds on floodgate's exported packages alone", f, path)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no file checked")
	}
}

// TestLogRuleBound: a sliding log whose state could outgrow one
// memcached item is refused by name, by CheckRule, Policy and SetRule;
// one just inside is taken.
func TestLogRuleBound(t *testing.T) {
	srv := memcachetest.Start(t)
	s := newStore(t, newClient(t, srv.Addr()), Config{})
	big := floodgate.Rule{Limit: 1_000_000, Period: time.Hour}
	if err := s.CheckRule(floodgate.SlidingLog, big); err == nil || !strings.Contains(err.Error(), "sliding_counter") {
		t.Fatalf("CheckRule(sliding_log, %v) = %v, want a refusal that names sliding_counter", big, err)
	}
	if _, err := s.Policy("big", floodgate.SlidingLog, big); err == nil {
		t.Fatal("Policy took a sliding_log too big for one item")
	}
	if err := s.CheckRule(floodgate.SlidingCounter, big); err != nil {
		t.Fatalf("CheckRule(sliding_counter, %v) = %v", big, err)
	}
	small := floodgate.Rule{Limit: 10_000, Period: time.Hour}
	p, err := s.Policy("small", floodgate.SlidingLog, small)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetRule(big); err == nil {
		t.Fatal("SetRule took a sliding_log too big for one item")
	}
}
