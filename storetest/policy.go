package storetest

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// exact: no key passes more than its rule, from many goroutines at once
// on two replicas: with the clock frozen, a key admits exactly its
// capacity, and a request of two policies never more than either.
func (r *runner) exact(t *testing.T) {
	for _, alg := range r.algs {
		r.run(t, alg, func(t *testing.T) {
			r.run(t, "OnePolicy", func(t *testing.T) { r.exactOne(t, alg) })
			r.run(t, "TwoPolicies", func(t *testing.T) { r.exactTwo(t, alg) })
		})
	}
}

// goroutines is how many goroutines ask each replica at once, and
// rounds how many requests each sends.
const (
	goroutines = 8
	rounds     = 8
)

// stores returns e's Store and, if the harness's Stores share their
// state, a replica of it.
func (e *env) stores() []floodgate.Store {
	if e.r.h.Shared {
		return []floodgate.Store{e.s, e.store()}
	}
	return []floodgate.Store{e.s}
}

// flood runs ask from goroutines goroutines on each store at once, each
// rounds times, and waits for them; ask reports an error to fail on.
func flood(t *testing.T, stores []floodgate.Store, ask func(s floodgate.Store, g, i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*goroutines)
	start := make(chan struct{})
	for si, s := range stores {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range rounds {
					if err := ask(s, si*goroutines+g, i); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// drainAll drains key's units of p from every replica in turn, until a
// round drains none, and returns how many passed.
func (e *env) drainAll(stores []floodgate.Store, ps []floodgate.StorePolicy, key string, limit int64) int64 {
	total := int64(0)
	for {
		round := int64(0)
		for i, s := range stores {
			round += e.drain(s, ps[i], key, limit)
		}
		total += round
		if round == 0 || total > limit {
			return total
		}
	}
}

// exactOne: goroutines on every replica ask one policy for costs of 1 to
// 3; then each replica drains the key: the admitted costs and the rest
// are exactly the capacity.
func (r *runner) exactOne(t *testing.T, alg string) {
	e := r.newEnv(t)
	const capacity = 40
	stores := e.stores()
	name := e.name()
	ps := make([]floodgate.StorePolicy, len(stores))
	for i, s := range stores {
		ps[i] = e.policyNamed(s, name, alg, rule(capacity))
	}
	var admitted atomic.Int64
	flood(t, stores, func(s floodgate.Store, g, i int) error {
		p := ps[g/goroutines]
		n := int64(1 + (g+i)%3)
		d, refused, err := s.Decide(e.ctx, []floodgate.Ask{{Policy: p, Key: "k", N: n}}, nil)
		switch {
		case err != nil:
			return err
		case d.Allowed != (refused < 0):
			return fmt.Errorf("a Decision that says refused %d, with %+v", refused, d)
		case d.Allowed:
			admitted.Add(n)
		}
		return nil
	})
	rest := e.drainAll(stores, ps, "k", capacity)
	if got := admitted.Load() + rest; got != capacity {
		t.Errorf("%d replicas × %d goroutines admitted %d units, and the key held %d more: %d in all, want exactly %d", len(stores), goroutines, admitted.Load(), rest, got, capacity)
	}
}

// exactTwo: goroutines on every replica ask two policies together: the
// request passes no more than the tighter one's capacity, which it
// spends exactly, and the other is charged no more than its own.
func (r *runner) exactTwo(t *testing.T, alg string) {
	e := r.newEnv(t)
	const wide, tight = 30, 20
	stores := e.stores()
	wideName, tightName := e.name(), e.name()
	pw := make([]floodgate.StorePolicy, len(stores))
	pt := make([]floodgate.StorePolicy, len(stores))
	for i, s := range stores {
		pw[i] = e.policyNamed(s, wideName, alg, rule(wide))
		pt[i] = e.policyNamed(s, tightName, alg, rule(tight))
	}
	var admitted atomic.Int64
	flood(t, stores, func(s floodgate.Store, g, i int) error {
		k := g / goroutines
		d, refused, err := s.Decide(e.ctx, []floodgate.Ask{{Policy: pw[k], Key: "k", N: 1}, {Policy: pt[k], Key: "k", N: 1}}, nil)
		switch {
		case err != nil:
			return err
		case d.Allowed != (refused < 0):
			return fmt.Errorf("a Decision that says refused %d, with %+v", refused, d)
		case d.Allowed:
			admitted.Add(1)
		}
		return nil
	})
	n := admitted.Load()
	restTight := e.drainAll(stores, pt, "k", tight)
	restWide := e.drainAll(stores, pw, "k", wide)
	if n+restTight != tight {
		t.Errorf("the request of two policies passed %d times, and the tighter policy's key held %d more: %d in all, want exactly %d", n, restTight, n+restTight, tight)
	}
	if n+restWide > wide {
		t.Errorf("the request of two policies passed %d times, and the wider policy's key held %d more: %d in all, beyond its %d", n, restWide, n+restWide, wide)
	}
}

// setRule: SetRule gives no key allowance. Each key holds after it what
// a Limiter's would (at most that, for a Store that takes allowance
// ahead); a rule SetRule refuses changes nothing.
func (r *runner) setRule(t *testing.T) {
	for _, alg := range r.algs {
		r.run(t, alg, func(t *testing.T) {
			e := r.newEnv(t)
			before := floodgate.Rule{Limit: 10, Period: 10 * time.Minute}
			for _, after := range []floodgate.Rule{
				{Limit: 20, Period: 20 * time.Minute},
				{Limit: 20, Period: 10 * time.Minute},
				{Limit: 2, Period: 2 * time.Minute},
				{Limit: 5, Period: time.Hour},
			} {
				p := e.policy(alg, before)
				ref, err := floodgate.New(floodgate.Config{Algorithm: alg, Rule: before, Clock: e.clock})
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range []int64{7, 1} {
					key := fmt.Sprint("spent", n)
					if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: p, Key: key, N: n}}, nil); refused != -1 {
						t.Fatalf("a first request of %d of 10: refused %d", n, refused)
					}
					ref.AllowN(key, n)
				}
				if err := p.SetRule(floodgate.Rule{}); err == nil {
					t.Errorf("SetRule(%+v): no error", floodgate.Rule{})
				}
				if err := p.SetRule(after); err != nil {
					t.Fatalf("SetRule(%+v): %v", after, err)
				}
				if err := ref.SetRule(after); err != nil {
					t.Fatal(err)
				}
				for _, key := range []string{"spent7", "spent1", "new"} {
					want := int64(0)
					for ref.AllowN(key, 1).Allowed {
						want++
					}
					got := e.drain(e.s, p, key, after.Capacity()+10)
					switch {
					case r.h.Ahead && got > want:
						t.Errorf("%+v to %+v: key %s holds %d, beyond the %d a Limiter's holds", before, after, key, got, want)
					case !r.h.Ahead && got != want:
						t.Errorf("%+v to %+v: key %s holds %d, a Limiter's %d", before, after, key, got, want)
					}
				}
			}
		})
	}
}

// checkAgrees: CheckRule takes exactly what Policy takes, and what a
// policy's SetRule takes.
func (r *runner) checkAgrees(t *testing.T) {
	e := r.newEnv(t)
	rules := []floodgate.Rule{
		rule(5),
		{Limit: 10, Period: time.Second},
		{Limit: 10, Period: time.Second, Burst: 10},
		{Limit: 10, Period: time.Second, Burst: 25},
		{},
		{Limit: 0, Period: time.Second},
		{Limit: -1, Period: time.Second},
		{Limit: 10, Period: 0},
		{Limit: 10, Period: -time.Second},
		{Limit: 10, Period: time.Second, Burst: -1},
		{Limit: 10, Period: 1},
		{Limit: 1, Period: 1},
		{Limit: 7, Period: 1500 * time.Nanosecond},
		{Limit: math.MaxInt64, Period: time.Second},
		{Limit: math.MaxInt64, Period: math.MaxInt64},
		{Limit: 1, Period: math.MaxInt64},
		{Limit: 1, Period: math.MaxInt64, Burst: math.MaxInt64},
	}
	for _, alg := range append([]string{"", "no-such-algorithm"}, r.algs...) {
		for _, rl := range rules {
			checked := checkRule(e.s, alg, rl)
			p, err := e.s.Policy(e.name(), alg, rl)
			if err == nil {
				_ = p.Close()
			}
			if (checked == nil) != (err == nil) {
				t.Errorf("%q %+v: CheckRule says %v, Policy %v", alg, rl, checked, err)
			}
			for _, x := range []error{checked, err} {
				if x != nil && x.Error() == "" {
					t.Errorf("%q %+v: an error with no message", alg, rl)
				}
			}
			if alg == "no-such-algorithm" {
				continue
			}
			live := e.policy(alg, rule(5))
			if err := live.SetRule(rl); (checked == nil) != (err == nil) {
				t.Errorf("%q %+v: CheckRule says %v, a policy's SetRule %v", alg, rl, checked, err)
			}
		}
	}
}

// names: a policy's name is free again once it is closed; on a Store
// whose state outlives it, a policy given the name again, on the Store
// or on one made after it, finds its clients' state as it was left.
func (r *runner) names(t *testing.T) {
	for _, alg := range r.algs {
		r.run(t, alg, func(t *testing.T) {
			e := r.newEnv(t)
			name := e.name()
			p, err := e.s.Policy(name, alg, rule(10))
			if err != nil {
				t.Fatal(err)
			}
			if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: p, Key: "k", N: 4}}, nil); refused != -1 {
				t.Fatalf("a first request of 4 of 10: refused %d", refused)
			}
			if err := p.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			again, err := e.s.Policy(name, alg, rule(10))
			if err != nil {
				t.Fatalf("Policy with the name of a closed policy: %v", err)
			}
			if !r.h.Shared {
				_ = again.Close()
				return
			}
			if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: again, Key: "k", N: 2}}, nil); refused != -1 {
				t.Fatalf("2 of the 6 left: refused %d", refused)
			}
			if err := again.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			restarted := e.store()
			e.holds(restarted, e.policyNamed(restarted, name, alg, rule(10)), "k", 4, "a key of a policy named again on a Store made after its own closed it")
		})
	}
}
