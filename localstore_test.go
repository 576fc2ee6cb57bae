package floodgate

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/plan"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// localStore is a LocalStore on clock whose algorithms may name a mutex
// twin, closed when t ends.
func localStore(t testing.TB, clock Clock) *LocalStore {
	t.Helper()
	s := NewLocalStore(LocalStoreConfig{Clock: clock})
	s.twins = true
	t.Cleanup(func() { s.Close() })
	return s
}

// mustPolicy is s's policy named name.
func mustPolicy(t testing.TB, s Store, name, alg string, r Rule) StorePolicy {
	t.Helper()
	p, err := s.Policy(name, alg, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// decide is s.Decide, failing t on an error.
func decide(t testing.TB, s Store, asks []Ask, each []Decision) (Decision, int) {
	t.Helper()
	d, j, err := s.Decide(context.Background(), asks, each)
	if err != nil {
		t.Fatal(err)
	}
	return d, j
}

// TestLocalStoreAllOrNothing: asks on several policies with keys of their
// own are all or nothing. A request refused by one ask leaves every other
// ask's key as it was, and each ask's answer is reported in order.
func TestLocalStoreAllOrNothing(t *testing.T) {
	s := localStore(t, NewManualClock(0))
	a := mustPolicy(t, s, "a", FixedWindow, Rule{Limit: 10, Period: time.Hour})
	b := mustPolicy(t, s, "b", TokenBucket, Rule{Limit: 4, Period: time.Hour})
	asks := []Ask{{Policy: a, Key: "x", N: 3}, {Policy: b, Key: "y", N: 2}}
	each := make([]Decision, 2)
	for i, want := range []int{-1, -1, 1, 1} {
		d, got := decide(t, s, asks, each)
		if got != want {
			t.Fatalf("request %d: refused by %d, want %d", i, got, want)
		}
		if want >= 0 && d != each[want] {
			t.Fatalf("request %d: the answer %+v is not the refusal %+v", i, d, each[want])
		}
	}
	// Two admitted: a holds 4 of 10, b holds 0 of 4; refusals charged none.
	if each[0].Remaining != 3 || !each[0].Allowed {
		t.Fatalf("a's answer after the refusal: %+v, want its Peek (allowed, 3 left after one more)", each[0])
	}
	if each[1].Allowed || each[1].Remaining != 0 {
		t.Fatalf("b's answer: %+v, want refused with none left", each[1])
	}
	if d, _ := a.Peek(context.Background(), "x"); d.Remaining != 3 {
		t.Fatalf("a would leave %d after one more, want 3: the refused requests kept a's grants", d.Remaining)
	}
}

// TestLocalStoreRepeatedAsks: asks of one policy and key are one ask of
// their summed cost, each receiving its answer; named once as a shadow
// and once enforced, they are an error, and nothing is charged.
func TestLocalStoreRepeatedAsks(t *testing.T) {
	s := localStore(t, NewManualClock(0))
	a := mustPolicy(t, s, "a", FixedWindow, Rule{Limit: 10, Period: time.Hour})
	each := make([]Decision, 2)
	// 6 then 5 of 10: 11, refused whole.
	if _, j := decide(t, s, []Ask{{Policy: a, Key: "z", N: 6}, {Policy: a, Key: "z", N: 5}}, each); j != 0 {
		t.Fatalf("6 and 5 of 10 on one key: refused by %d, want 0 (the first of the merged asks)", j)
	}
	if each[0] != each[1] || each[0].Allowed {
		t.Fatalf("the merged asks answered %+v and %+v, want one refusal", each[0], each[1])
	}
	if d, _ := a.Peek(context.Background(), "z"); d.Remaining != 9 {
		t.Fatalf("z would leave %d after one more, want 9: the refusal charged", d.Remaining)
	}
	if _, j := decide(t, s, []Ask{{Policy: a, Key: "z", N: 6}, {Policy: a, Key: "z", N: 4}}, each); j != -1 {
		t.Fatalf("6 and 4 of 10: refused by %d, want -1", j)
	}
	if each[0].Remaining != 0 || each[1] != each[0] {
		t.Fatalf("answers %+v, %+v: want both the charge of 10, none left", each[0], each[1])
	}
	_, _, err := s.Decide(context.Background(), []Ask{{Policy: a, Key: "w", N: 1}, {Policy: a, Key: "w", N: 1, Shadow: true}}, each)
	if err == nil {
		t.Fatal("one policy and key as a shadow and enforced: no error")
	}
	if d, _ := a.Peek(context.Background(), "w"); d.Remaining != 9 {
		t.Fatalf("the refused asks charged w: %d left after one more", d.Remaining)
	}
}

// TestLocalStoreBadAsks: a cost below 1 or above the capacity refuses
// before anything is charged, with RetryAfter Never; as a shadow it
// refuses as a shadow: the enforced asks charge, no shadow does. No
// asks, too many, or a policy of another Store are errors.
func TestLocalStoreBadAsks(t *testing.T) {
	s := localStore(t, NewManualClock(0))
	a := mustPolicy(t, s, "a", TokenBucket, Rule{Limit: 10, Period: time.Hour})
	b := mustPolicy(t, s, "b", FixedWindow, Rule{Limit: 10, Period: time.Hour})
	for name, n := range map[string]int64{"zero": 0, "negative": -5, "past capacity": 11} {
		each := make([]Decision, 3)
		asks := []Ask{{Policy: a, Key: "k", N: 2}, {Policy: b, Key: "k", N: n}, {Policy: a, Key: "after", N: 1}}
		if _, j := decide(t, s, asks, each); j != 1 {
			t.Fatalf("%s: refused by %d, want 1", name, j)
		}
		if each[1].Allowed || each[1].RetryAfter != Never {
			t.Fatalf("%s: answer %+v, want refused with RetryAfter Never", name, each[1])
		}
		if d, _ := a.Peek(context.Background(), "k"); d.Remaining != 9 {
			t.Fatalf("%s: k would leave %d after one more, want 9", name, d.Remaining)
		}
		// As a shadow, a shadow's refusal: the enforced asks charge, the
		// other shadow does not.
		asks[1].Shadow = true
		asks = append(asks, Ask{Policy: b, Key: "other", N: 1, Shadow: true})
		if _, j := decide(t, s, asks, nil); j != 1 {
			t.Fatalf("%s as a shadow: refused by %d, want 1", name, j)
		}
		if d, _ := a.Peek(context.Background(), "k"); d.Remaining != 7 {
			t.Fatalf("%s as a shadow: k would leave %d after one more, want 7", name, d.Remaining)
		}
		if d, _ := b.Peek(context.Background(), "other"); d.Remaining != 9 {
			t.Fatalf("%s as a shadow: the other shadow was charged (%d left after one more)", name, d.Remaining)
		}
		s2 := localStore(t, NewManualClock(0))
		a = mustPolicy(t, s2, "a", TokenBucket, Rule{Limit: 10, Period: time.Hour})
		b = mustPolicy(t, s2, "b", FixedWindow, Rule{Limit: 10, Period: time.Hour})
		s = s2
	}
	other := mustPolicy(t, localStore(t, nil), "o", TokenBucket, Rule{Limit: 1, Period: time.Hour})
	for name, asks := range map[string][]Ask{"none": nil, "nine": make([]Ask, 9), "another Store's": {{Policy: a, Key: "k", N: 1}, {Policy: other, Key: "k", N: 1}},
		"nil policy": {{Key: "k", N: 1}}} {
		for i := range asks {
			if asks[i].Policy == nil && name == "nine" {
				asks[i] = Ask{Policy: a, Key: "k", N: 1}
			}
		}
		d, _, err := s.Decide(context.Background(), asks, nil)
		if err == nil || d.Allowed {
			t.Errorf("%s: answered %+v, %v; want a refusal and an error", name, d, err)
		}
	}
	if d, _ := a.Peek(context.Background(), "k"); d.Remaining != 9 {
		t.Fatalf("the erroneous calls charged k: %d left after one more", d.Remaining)
	}
}

// TestLocalStoreShadows: a shadow that refuses leaves the enforced asks
// charged and charges no shadow; an enforced refusal charges nothing.
func TestLocalStoreShadows(t *testing.T) {
	s := localStore(t, NewManualClock(0))
	e := mustPolicy(t, s, "e", FixedWindow, Rule{Limit: 5, Period: time.Hour})
	sh := mustPolicy(t, s, "s", FixedWindow, Rule{Limit: 2, Period: time.Hour})
	sh2 := mustPolicy(t, s, "s2", FixedWindow, Rule{Limit: 100, Period: time.Hour})
	asks := []Ask{{Policy: sh2, Key: "k", N: 1, Shadow: true}, {Policy: e, Key: "k", N: 1}, {Policy: sh, Key: "k", N: 1, Shadow: true}}
	each := make([]Decision, 3)
	for i := range 6 {
		d, j := decide(t, s, asks, each)
		switch {
		case i < 2 && j != -1, i >= 2 && i < 5 && j != 2, i == 5 && j != 1:
			t.Fatalf("request %d: refused by %d", i, j)
		}
		if i >= 2 && i < 5 && (!d.Allowed || d != each[1]) {
			t.Fatalf("request %d: answer %+v, want the enforced policy's admission %+v", i, d, each[1])
		}
	}
	left := func(p StorePolicy) int64 {
		d, _ := p.Peek(context.Background(), "k")
		if !d.Allowed {
			return 0
		}
		return d.Remaining + 1
	}
	if left(e) != 0 || left(sh) != 0 || left(sh2) != 98 {
		t.Fatalf("left: enforced %d, shadow %d, other shadow %d; want 0, 0, 98", left(e), left(sh), left(sh2))
	}
}

// TestLocalStoreConcurrent: 64 goroutines send two kinds of request on a
// frozen clock, {x of A, y of B} and {x of A} alone, for every algorithm
// and twin as A. B admits exactly its 60; A exactly its 100 in all; and
// y's state shows exactly the pairs admitted, so no refused pair kept a
// charge anywhere (but for the sliding log, charged for a refusal at
// worst, never the reverse).
func TestLocalStoreConcurrent(t *testing.T) {
	for _, alg := range []string{TokenBucket, testhook.TokenBucketMutex, LeakyBucket, FixedWindow, SlidingCounter, SlidingLog, testhook.SlidingLogMutex} {
		t.Run(alg, func(t *testing.T) {
			s := localStore(t, NewManualClock(0))
			a := mustPolicy(t, s, "a", alg, Rule{Limit: 100, Period: time.Hour})
			b := mustPolicy(t, s, "b", FixedWindow, Rule{Limit: 60, Period: time.Hour})
			var pairs, singles atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pair := []Ask{{Policy: a, Key: "x", N: 1}, {Policy: b, Key: "y", N: 1}}
					alone := []Ask{{Policy: a, Key: "x", N: 1}}
					for i := range 40 {
						if (g+i)%3 != 0 {
							if _, j, _ := s.Decide(context.Background(), pair, nil); j < 0 {
								pairs.Add(1)
							}
						} else if _, j, _ := s.Decide(context.Background(), alone, nil); j < 0 {
							singles.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if p := pairs.Load(); p > 60 {
				t.Fatalf("B admitted %d pairs, above its 60", p)
			}
			if got := pairs.Load() + singles.Load(); got != 100 && !(alg == SlidingLog || alg == testhook.SlidingLogMutex) {
				t.Fatalf("A admitted %d in all, want exactly 100", got)
			} else if got > 100 {
				t.Fatalf("A admitted %d in all, above 100", got)
			}
			left := int64(0)
			if d, _ := b.Peek(context.Background(), "y"); d.Allowed {
				left = d.Remaining + 1
			}
			if left != 60-pairs.Load() {
				t.Fatalf("y holds %d, want %d: a refused pair kept its charge", left, 60-pairs.Load())
			}
		})
	}
}

// TestLocalStoreAllocatesNothing: up to MaxPolicies asks on existing
// keys, nothing is allocated, admitted or refused.
func TestLocalStoreAllocatesNothing(t *testing.T) {
	s := localStore(t, NewManualClock(0))
	big := mustPolicy(t, s, "big", TokenBucket, Rule{Limit: 1 << 40, Period: time.Hour})
	small := mustPolicy(t, s, "small", FixedWindow, Rule{Limit: 1, Period: time.Hour})
	asks := make([]Ask, MaxPolicies)
	for i := range asks {
		asks[i] = Ask{Policy: big, Key: string(rune('a' + i)), N: 1}
	}
	each := make([]Decision, MaxPolicies)
	ctx := context.Background()
	if a := testing.AllocsPerRun(1000, func() { s.Decide(ctx, asks, each) }); a != 0 {
		t.Fatalf("admitted: %v allocations a call, want 0", a)
	}
	asks[MaxPolicies-1] = Ask{Policy: small, Key: "s", N: 1}
	s.Decide(ctx, asks, each)
	if a := testing.AllocsPerRun(1000, func() { s.Decide(ctx, asks, each) }); a != 0 {
		t.Fatalf("refused: %v allocations a call, want 0", a)
	}
	one := asks[:1]
	if a := testing.AllocsPerRun(1000, func() { s.Decide(ctx, one, each) }); a != 0 {
		t.Fatalf("one ask: %v allocations a call, want 0", a)
	}
}

// TestLocalStorePolicies: names are unique among live policies and free
// again at Close; CheckRule refuses what Policy refuses, by the same message;
// a registered algorithm needs MaxKeys -1.
func TestLocalStorePolicies(t *testing.T) {
	s := localStore(t, nil)
	p := mustPolicy(t, s, "p", "", Rule{Limit: 1, Period: time.Second})
	if _, err := s.Policy("p", "", Rule{Limit: 2, Period: time.Second}); err == nil {
		t.Fatal("two live policies named p")
	}
	p.Close()
	mustPolicy(t, s, "p", FixedWindow, Rule{Limit: 2, Period: time.Second})
	for _, c := range []struct {
		alg  string
		rule Rule
	}{{"", Rule{Limit: 0, Period: time.Second}}, {"nope", Rule{Limit: 1, Period: time.Second}}, {FixedWindow, Rule{Limit: 1}}} {
		errCheck := s.CheckRule(c.alg, c.rule)
		_, errPolicy := s.Policy("q", c.alg, c.rule)
		if errCheck == nil || errPolicy == nil || errCheck.Error() != errPolicy.Error() {
			t.Errorf("%q %+v: CheckRule said %v, Policy %v", c.alg, c.rule, errCheck, errPolicy)
		}
	}
	if err := s.CheckRule(SlidingLog, Rule{Limit: 5, Period: time.Second}); err != nil {
		t.Error(err)
	}
}

// TestLocalStoreSweeps: the Store forgets the keys its policies hold once
// they are idle for IdleTTL, and none before.
func TestLocalStoreSweeps(t *testing.T) {
	clock := NewManualClock(0)
	s := NewLocalStore(LocalStoreConfig{Clock: clock, IdleTTL: time.Minute})
	defer s.Close()
	p := mustPolicy(t, s, "p", FixedWindow, Rule{Limit: 1, Period: time.Second})
	decide(t, s, []Ask{{Policy: p, Key: "k", N: 1}}, nil)
	l := p.(*localPolicy).l
	s.sweepNow()
	if l.Len() != 1 {
		t.Fatalf("swept a key in use: %d held", l.Len())
	}
	clock.Advance(time.Minute + time.Second)
	s.sweepNow()
	if l.Len() != 0 {
		t.Fatalf("%d held after the key was idle for IdleTTL", l.Len())
	}
}

// TestLocalStoreRegistered: a registered algorithm is refused under a
// bound with an error that names MaxKeys 0 and Unbounded, and taken with
// either, unbounded (MaxKeys cannot bound it).
func TestLocalStoreRegistered(t *testing.T) {
	err := testhook.Register("localstore_test_registered", func(r Rule) (keystate.Algorithm, error) {
		a, err := testhook.Algorithm(Config{Rule: r})
		if err != nil {
			return nil, err
		}
		return a.(keystate.Algorithm), nil // registered: no builtin, whatever its states
	})
	if err != nil {
		t.Fatal(err)
	}
	bounded := NewLocalStore(LocalStoreConfig{MaxKeys: 100, Clock: NewManualClock(0)})
	defer bounded.Close()
	_, err = bounded.Policy("p", "localstore_test_registered", Rule{Limit: 1, Period: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "MaxKeys to 0 or Unbounded") {
		t.Fatalf("under a bound: %v", err)
	}
	if err := bounded.CheckRule("localstore_test_registered", Rule{Limit: 1, Period: time.Hour}); err == nil || !strings.Contains(err.Error(), "MaxKeys to 0 or Unbounded") {
		t.Fatalf("CheckRule under a bound: %v", err)
	}
	for _, s := range []*LocalStore{localStore(t, nil), NewLocalStore(LocalStoreConfig{MaxKeys: Unbounded, Clock: NewManualClock(0)})} {
		defer s.Close()
		p := mustPolicy(t, s, "p", "localstore_test_registered", Rule{Limit: 1, Period: time.Hour})
		if s.Limiter(p).Stats().MaxKeys != 0 {
			t.Fatalf("a registered algorithm's policy is bounded at %d keys", s.Limiter(p).Stats().MaxKeys)
		}
		if _, j := decide(t, s, []Ask{{Policy: p, Key: "k", N: 1}}, nil); j != -1 {
			t.Fatal("the registered algorithm refused its first request")
		}
		if _, j := decide(t, s, []Ask{{Policy: p, Key: "k", N: 1}}, nil); j != 0 {
			t.Fatal("the registered algorithm admitted past 1 an hour")
		}
	}
}

// TestMaxPoliciesIsPlans: the Stores' shared preparation of asks holds
// as many as a decision takes.
func TestMaxPoliciesIsPlans(t *testing.T) {
	if MaxPolicies != plan.Max {
		t.Fatalf("MaxPolicies %d, plan.Max %d", MaxPolicies, plan.Max)
	}
}
