package bench

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The comparison is fair only if every adapter limits as configured: these
// tests hold each one to the rule before any benchmark trusts its figures.

func newOrSkip(t *testing.T, impl Impl, o Options) Limiter {
	t.Helper()
	l, release, err := impl.New(o)
	if errors.Is(err, errUnsupported) {
		t.Skipf("%s: %v", impl.Name, err)
	}
	if err != nil {
		t.Fatalf("%s: %v", impl.Name, err)
	}
	t.Cleanup(release)
	return l
}

func allImpls() []Impl {
	return append(append(Floodgates(), append(Variants(), tscImpl())...), Peers()...)
}

// TestScarceDeniesSecond: with one request an hour, the first call on a key
// passes and the second is refused.
func TestScarceDeniesSecond(t *testing.T) {
	for _, impl := range allImpls() {
		if !impl.Denies {
			continue
		}
		t.Run(impl.Name, func(t *testing.T) {
			l := newOrSkip(t, impl, Options{Rate: Scarce})
			if !l.Allow("a") {
				t.Fatal("first request refused")
			}
			if l.Allow("a") {
				t.Fatal("second request within the hour passed")
			}
		})
	}
}

// TestPerKeyIsolation: a per-key implementation keeps a separate limit for
// each key, so exhausting one key leaves another untouched.
func TestPerKeyIsolation(t *testing.T) {
	for _, impl := range allImpls() {
		if !impl.PerKey || !impl.Denies {
			continue
		}
		t.Run(impl.Name, func(t *testing.T) {
			l := newOrSkip(t, impl, Options{Rate: Scarce})
			l.Allow("a")
			if !l.Allow("b") {
				t.Fatal("a fresh key was refused after another key was exhausted")
			}
		})
	}
}

// TestPlentyAdmitsABurst: Plenty never refuses at benchmark speeds; a burst
// of 10,000 calls on one key all pass (uber's Take included: it would have
// to sleep, and does not refuse, so it is checked for passing only).
func TestPlentyAdmitsABurst(t *testing.T) {
	for _, impl := range allImpls() {
		t.Run(impl.Name, func(t *testing.T) {
			l := newOrSkip(t, impl, Options{Rate: Plenty})
			for i := range 10_000 {
				if !l.Allow("hot") {
					t.Fatalf("call %d refused under Plenty", i)
				}
			}
		})
	}
}

// TestGlobalCapRefuses: where an implementation supports a global cap, a
// cap of one request an hour refuses a second key after the first passed.
func TestGlobalCapRefuses(t *testing.T) {
	for _, impl := range allImpls() {
		if !impl.PerKey {
			continue
		}
		t.Run(impl.Name, func(t *testing.T) {
			l := newOrSkip(t, impl, Options{Rate: Plenty, Global: &Scarce})
			if !l.Allow("a") {
				t.Fatal("first request refused")
			}
			if l.Allow("b") {
				t.Fatal("a second key passed a global cap of one")
			}
		})
	}
}

// TestChurnOptionsBuild: every implementation run in the churn scenario
// accepts an idle TTL, and the others say they cannot.
func TestChurnOptionsBuild(t *testing.T) {
	for _, impl := range keyImpls {
		t.Run(impl.Name, func(t *testing.T) {
			l, release, err := impl.New(Options{Rate: Plenty, IdleTTL: time.Minute})
			if errors.Is(err, errUnsupported) {
				t.Skipf("%s has no eviction", impl.Name)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			if !l.Allow("k") {
				t.Fatal("first request refused")
			}
		})
	}
}

// TestFloorIsNoLimiter: the floor answers true for any key and holds
// nothing.
func TestFloorIsNoLimiter(t *testing.T) {
	l := newOrSkip(t, Floor, Options{Rate: Scarce})
	for range 3 {
		if !l.Allow("k") {
			t.Fatal("floor refused")
		}
	}
}

// TestKeySetAndPicks: key sets are distinct and pick sequences stay in
// range, for both distributions.
func TestKeySetAndPicks(t *testing.T) {
	ks := keySet(1000)
	seen := make(map[string]bool, len(ks))
	for _, k := range ks {
		if seen[k] {
			t.Fatalf("key %q twice", k)
		}
		seen[k] = true
	}
	for _, dist := range []string{"uniform", "zipf"} {
		seq := picks(len(ks), dist)
		if len(seq) != PickLen {
			t.Fatalf("%s: %d picks, want %d", dist, len(seq), PickLen)
		}
		for _, i := range seq {
			if int(i) >= len(ks) {
				t.Fatalf("%s: pick %d out of range", dist, i)
			}
		}
	}
	// Zipf(1.1) picks its most frequent key far more often than uniform.
	count0 := func(seq []uint32) (n int) {
		for _, i := range seq {
			if i == 0 {
				n++
			}
		}
		return n
	}
	if u, z := count0(picks(1000, "uniform")), count0(picks(1000, "zipf")); z < 10*u {
		t.Fatalf("zipf picks key 0 %d times, uniform %d: not skewed", z, u)
	}
}

// TestBoundedChurn: with MaxKeys, an implementation that can bound its
// keys holds no more than the bound however many new keys come, and new
// keys pass. (With a burst of 1,000, a key that took one token and was
// evicted leaves 999 for any new key that floodgate's sketch confuses
// with it. A window or a log evicted at the bound comes back spent for
// the rest of its window, and so does a new key that the sketch confuses
// with it: for those only the bound is checked.)
func TestBoundedChurn(t *testing.T) {
	for _, impl := range allImpls() {
		if !impl.PerKey {
			continue
		}
		t.Run(impl.Name, func(t *testing.T) {
			l := newOrSkip(t, impl, Options{Rate: Rate{Limit: 1000, Period: time.Hour}, MaxKeys: 100})
			window := strings.Contains(impl.Name, "-fw") || strings.Contains(impl.Name, "-sc") || strings.Contains(impl.Name, "-sl")
			for i := range 1000 {
				if !l.Allow("k"+strconv.Itoa(i)) && !window {
					t.Fatalf("new key %d refused", i)
				}
			}
			if fl, ok := l.(*floodgate.Limiter); ok && fl.Len() > 100 {
				t.Fatalf("%d keys held, above the bound of 100", fl.Len())
			}
		})
	}
}
