package storetest

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// steps is how many steps each differential run takes.
const steps = 200

// limiter: each algorithm decides as a floodgate.Limiter of the same
// name, rule and clock would, step by step through a random sequence of
// requests, repeats, Peeks and (on a Settler) Charges on a few keys, on
// replicas chosen at random, with the clock moved at random between
// them. A Store that takes allowance ahead (Harness.Ahead) is held to
// the weaker promise: every request it admits, a Limiter fed the same
// admissions admits too.
func (r *runner) limiter(t *testing.T) {
	for _, alg := range r.algs {
		r.run(t, alg, func(t *testing.T) {
			for i, rl := range rulesFor(alg) {
				r.run(t, fmt.Sprintf("%d_per_%v_burst_%d", rl.Limit, rl.Period, rl.Burst), func(t *testing.T) {
					r.differential(t, alg, rl, uint64(i))
				})
			}
		})
	}
}

// rulesFor are the rules the differential runs try for alg: steps
// (Period/Limit for the buckets, Period for the windows) in whole
// milliseconds, which every backend holds exactly.
func rulesFor(alg string) []floodgate.Rule {
	switch alg {
	case floodgate.TokenBucket, floodgate.LeakyBucket:
		return []floodgate.Rule{{Limit: 10, Period: time.Second}, {Limit: 4, Period: time.Second, Burst: 7}, {Limit: 100, Period: time.Minute}}
	default:
		return []floodgate.Rule{{Limit: 10, Period: time.Second}, {Limit: 4, Period: 100 * time.Millisecond}, {Limit: 50, Period: time.Minute}}
	}
}

// differential is one run of limiter's comparison, for alg and rl.
func (r *runner) differential(t *testing.T, alg string, rl floodgate.Rule, seed uint64) {
	e := r.newEnv(t)
	ref, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: rl, Clock: e.clock})
	if err != nil {
		t.Fatalf("the Limiter to compare with: %v", err)
	}
	defer ref.Close()
	h := fnv.New64a()
	h.Write([]byte(alg))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	stores := e.stores()
	name := e.name()
	ps := make([]floodgate.StorePolicy, len(stores))
	for i, s := range stores {
		ps[i] = e.policyNamed(s, name, alg, rl)
	}
	capacity := rl.Capacity()
	cost := func() int64 {
		switch x := rng.IntN(20); {
		case x < 13:
			return 1
		case x < 19:
			return 1 + rng.Int64N(capacity)
		case x == 19 && rng.IntN(2) == 0:
			return 0
		default:
			return capacity + 1
		}
	}
	advance := func() time.Duration {
		ms := int64(time.Millisecond)
		switch x := rng.IntN(10); {
		case x < 3:
			return 0
		case x < 8:
			return time.Duration((1 + rng.Int64N(max(1, int64(rl.Period)/4/ms))) * ms)
		default:
			return time.Duration((1 + rng.Int64N(2*int64(rl.Period)/ms)) * ms)
		}
	}
	var log []string // the steps so far, for a failure's message
	fail := func(format string, args ...any) {
		t.Helper()
		start := max(0, len(log)-8)
		t.Fatalf("step %d: "+format+"\nthe steps before it, latest last:\n  %s", append([]any{len(log) - 1}, append(args, joinLines(log[start:]))...)...)
	}
	for range steps {
		e.clock.Advance(advance())
		key := fmt.Sprint("k", rng.IntN(3))
		k := rng.IntN(len(stores))
		s, p := stores[k], ps[k]
		switch x := rng.IntN(20); {
		case x < 12: // a request
			n := cost()
			log = append(log, fmt.Sprintf("at +%v: replica %d, Decide %q N=%d", time.Duration(e.clock.Now()-epoch), k, key, n))
			got, refused, err := s.Decide(e.ctx, []floodgate.Ask{{Policy: p, Key: key, N: n}}, nil)
			if err != nil {
				fail("Decide: %v", err)
			}
			if got.Allowed != (refused < 0) {
				fail("Decide: refused %d with %+v", refused, got)
			}
			r.compare(fail, ref, key, n, got)
		case x < 15: // a request of two asks of the key: one of their sum
			n1, n2 := 1+rng.Int64N(capacity), 1+rng.Int64N(capacity)
			log = append(log, fmt.Sprintf("at +%v: replica %d, Decide %q N=%d and N=%d", time.Duration(e.clock.Now()-epoch), k, key, n1, n2))
			got, refused, err := s.Decide(e.ctx, []floodgate.Ask{{Policy: p, Key: key, N: n1}, {Policy: p, Key: key, N: n2}}, nil)
			if err != nil {
				fail("Decide: %v", err)
			}
			if got.Allowed != (refused < 0) {
				fail("Decide: refused %d with %+v", refused, got)
			}
			r.compare(fail, ref, key, n1+n2, got)
		case x < 18: // a Peek
			log = append(log, fmt.Sprintf("at +%v: replica %d, Peek %q", time.Duration(e.clock.Now()-epoch), k, key))
			got, err := p.Peek(e.ctx, key)
			if err != nil {
				fail("Peek: %v", err)
			}
			if want := ref.Peek(key); !r.h.Ahead && !r.same(got, want) {
				fail("Peek: %+v; a Limiter's: %+v", got, want)
			}
		default: // a Charge, on a Settler
			st, ok := s.(floodgate.Settler)
			if !ok {
				continue
			}
			n := 1 + rng.Int64N(capacity+2)
			log = append(log, fmt.Sprintf("at +%v: replica %d, Charge %q N=%d", time.Duration(e.clock.Now()-epoch), k, key, n))
			got, err := st.Charge(e.ctx, []floodgate.Ask{{Policy: p, Key: key, N: n}}, nil)
			want, wantErr := ref.Charge(key, n)
			switch {
			case (err == nil) != (wantErr == nil):
				fail("Charge: %+v, %v; a Limiter's: %+v, %v", got, err, want, wantErr)
			case !r.h.Ahead && !r.same(got, want):
				fail("Charge: %+v; a Limiter's: %+v", got, want)
			}
		}
	}
}

// compare checks a Store's answer got to a request of n for key against
// ref's, which it charges as the Store was charged: the same Decision,
// or, for a Store that takes allowance ahead, a Limiter's admission of
// every request the Store admitted.
func (r *runner) compare(fail func(string, ...any), ref *floodgate.Limiter, key string, n int64, got floodgate.Decision) {
	if r.h.Ahead {
		if !got.Allowed {
			return
		}
		if want := ref.AllowN(key, n); !want.Allowed {
			fail("the Store admitted %+v what a Limiter fed the same admissions refuses: %+v", got, want)
		}
		return
	}
	want := ref.AllowN(key, n)
	if n < 1 || n > want.Limit {
		// A cost no state holds: the contract names RetryAfter alone,
		// and a Store answers it before it looks at the key.
		if got.Allowed || got.RetryAfter != floodgate.Never || got.Limit != want.Limit {
			fail("Decide: %+v; want a refusal with RetryAfter Never and Limit %d", got, want.Limit)
		}
		return
	}
	if !r.same(got, want) {
		fail("Decide: %+v; a Limiter's: %+v", got, want)
	}
}

// same reports whether a Store's Decision got is a Limiter's want, but
// for waits rounded up to the harness's Resolution.
func (r *runner) same(got, want floodgate.Decision) bool {
	near := func(got, want time.Duration) bool {
		res := r.h.Resolution
		if got == want || res <= 1 || want == floodgate.Never || want < 0 {
			return got == want
		}
		up := (want + res - 1) / res * res
		return got >= want && got <= up
	}
	if !near(got.RetryAfter, want.RetryAfter) || !near(got.ResetAfter, want.ResetAfter) {
		return false
	}
	got.RetryAfter, got.ResetAfter = want.RetryAfter, want.ResetAfter
	return got == want
}

// joinLines joins lines, one a line.
func joinLines(lines []string) string {
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}
