// Package storetest is the conformance suite of floodgate's Store
// family: every obligation that floodgate.Store, StorePolicy, Settler
// and SlotStore state in their documentation, as a subtest that any
// backend runs from its own tests with Run.
//
// The suite drives the Store on a ManualClock that only it moves, so
// that every subtest is exact and none sleeps: a Store under test reads
// that clock wherever it would read the time (a Store on a server whose
// clock decides takes it in place of the server's, by a hook of its own
// tests). Each subtest makes its own Stores and names its policies
// after itself, so that subtests share nothing on a backend that keeps
// state between them.
//
// An obligation that a Store does not meet fails its subtest. Only a
// capability that the Store lacks is skipped, with a message that says
// so: the Settler subtests on a Store that is not a Settler, the slot
// subtests on one that is not a SlotStore, the outage subtests without
// Harness.Outage, the subtests of replicas on a Store whose replicas
// share nothing. Each subtest is named after its obligation, such as
// Decide/token_bucket/AllOrNothing, so that go test's -run and -skip
// flags select it: a backend with a known failure that it cannot fix
// yet skips that subtest by name, and says why.
package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Harness is what the suite needs of a backend. Only New is required.
type Harness struct {
	// New returns a new Store whose decisions read clock, and closes it
	// when t ends (t.Cleanup). It is called once for each replica a
	// subtest needs, with one clock for the replicas of that subtest:
	// when Shared is true, the Stores that one clock's calls return are
	// replicas of one backend, sharing their state.
	New func(t *testing.T, clock *floodgate.ManualClock) floodgate.Store

	// Shared says that two Stores New returns for one clock share their
	// state (replicas of a service on one Redis), and that a Store made
	// after another is closed finds what it left (a restart).
	Shared bool

	// Algorithms are the algorithm names the Store's Policy takes, each
	// tested on its own; nil means floodgate's five built-in ones. A
	// subtest compares each to a floodgate.Limiter of that name, which
	// must be registered in the test's process.
	Algorithms []string

	// Ahead says that the Store takes allowance ahead of its requests
	// and spends it in process, as redislimit's lease mode does: it may
	// refuse what a Limiter would admit, never the reverse. The
	// comparisons with a Limiter then check only that every request the
	// Store admits, a Limiter fed the same admissions admits too, where
	// they otherwise ask for the Limiter's Decision, field by field.
	Ahead bool

	// Resolution is the step of the clock that decides (redislimit's:
	// the microsecond that Redis's clock counts): a Decision's waits,
	// RetryAfter and ResetAfter, may be a Limiter's rounded up to a
	// whole Resolution, never down. 0 means a nanosecond: the same
	// waits.
	Resolution time.Duration

	// Outage, if not nil, makes every Store that New returned unable to
	// reach its state, and returns the function that ends the outage,
	// after which the Stores reach their state again (perhaps emptied,
	// as by a restart of their server) at their next call. Without it,
	// the outage subtests are skipped.
	Outage func(t *testing.T) (end func())
}

// Run runs the conformance suite on the Store that h describes, as
// subtests of t: Decide's obligations for each algorithm (all or
// nothing, the refusal's index, costs no state can hold, repeats,
// shadows, each, keys not kept, contexts that end, errors), exactness
// across replicas at any concurrency, SetRule, CheckRule, policy names,
// each algorithm against a floodgate.Limiter, and, as the Store
// implements them, Settler's and SlotStore's obligations and the
// failure mode of a Store that cannot reach its state.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("storetest: Harness.New is nil")
	}
	algs := h.Algorithms
	if algs == nil {
		algs = builtins
	}
	if len(algs) == 0 {
		t.Fatal("storetest: Harness.Algorithms is empty (nil means the built-in ones)")
	}
	r := &runner{h: h, algs: algs}
	r.run(t, "Decide", r.decide)
	r.run(t, "Exact", r.exact)
	r.run(t, "SetRule", r.setRule)
	r.run(t, "CheckRule", r.checkAgrees)
	r.run(t, "Names", r.names)
	r.run(t, "Limiter", r.limiter)
	r.run(t, "Settler", r.settler)
	r.run(t, "Slots", r.slots)
	r.run(t, "Outage", r.outage)
}

// builtins are floodgate's own algorithms.
var builtins = []string{floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow, floodgate.SlidingCounter, floodgate.SlidingLog}

// epoch is where every subtest's clock starts: an instant of 2023 on the
// Unix scale, in nanoseconds, as a server's own clock would read it.
const epoch = int64(1_700_000_000) * int64(time.Second)

// runner runs the subtests of one Run.
type runner struct {
	h    Harness
	algs []string
}

// run runs f as the subtest name of t.
func (r *runner) run(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	t.Run(name, f)
}

// env is one subtest's world: its clock, its first Store, and the
// policies it names after itself.
type env struct {
	t     *testing.T
	r     *runner
	clock *floodgate.ManualClock
	s     floodgate.Store
	ctx   context.Context
	seq   int
}

// newEnv makes a subtest's clock, at epoch, and its first Store.
func (r *runner) newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, r: r, clock: floodgate.NewManualClock(epoch), ctx: context.Background()}
	e.s = e.store()
	return e
}

// store returns a new Store on e's clock: a replica of e.s, if the
// harness's Stores share their state.
func (e *env) store() floodgate.Store {
	e.t.Helper()
	s := e.r.h.New(e.t, e.clock)
	if s == nil {
		e.t.Fatal("storetest: Harness.New returned nil")
	}
	return s
}

// replica returns a second Store that shares e.s's state, or skips the
// subtest when the harness's Stores share nothing.
func (e *env) replica() floodgate.Store {
	e.t.Helper()
	if !e.r.h.Shared {
		e.t.Skip("the harness's Stores share no state (Harness.Shared is false): there are no replicas to test")
	}
	return e.store()
}

// name returns a policy name of this subtest that no other uses.
func (e *env) name() string {
	e.seq++
	return fmt.Sprintf("%s#%d", e.t.Name(), e.seq)
}

// policy makes a policy of s, named name, or fails the subtest.
func (e *env) policyNamed(s floodgate.Store, name, alg string, rule floodgate.Rule) floodgate.StorePolicy {
	e.t.Helper()
	p, err := s.Policy(name, alg, rule)
	if err != nil {
		e.t.Fatalf("Policy(%q, %q, %+v): %v", name, alg, rule, err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	return p
}

// policy makes a policy of e.s under a new name.
func (e *env) policy(alg string, rule floodgate.Rule) floodgate.StorePolicy {
	e.t.Helper()
	return e.policyNamed(e.s, e.name(), alg, rule)
}

// rule is a rule of capacity c that every backend holds exactly: c per
// c minutes (a token every minute), with the burst c.
func rule(c int64) floodgate.Rule {
	return floodgate.Rule{Limit: c, Period: time.Duration(c) * time.Minute}
}

// decide is s.Decide, failing the subtest on an error.
func (e *env) decide(s floodgate.Store, asks []floodgate.Ask, each []floodgate.Decision) (floodgate.Decision, int) {
	e.t.Helper()
	d, refused, err := s.Decide(e.ctx, asks, each)
	if err != nil {
		e.t.Fatalf("Decide(%s): %v", describe(asks), err)
	}
	return d, refused
}

// drain asks s for key's units of p one at a time until one is refused,
// at most limit+1 times, and returns how many passed: with the clock
// frozen, what the key held.
func (e *env) drain(s floodgate.Store, p floodgate.StorePolicy, key string, limit int64) int64 {
	e.t.Helper()
	n := int64(0)
	for range limit + 1 {
		d, refused := e.decide(s, []floodgate.Ask{{Policy: p, Key: key, N: 1}}, nil)
		if refused >= 0 {
			if d.Allowed {
				e.t.Fatalf("Decide refused by ask %d, with a Decision that admits: %+v", refused, d)
			}
			return n
		}
		n++
	}
	return n
}

// holds fails the subtest unless key holds exactly want units of p on
// s now (the clock frozen), which it spends to find out.
func (e *env) holds(s floodgate.Store, p floodgate.StorePolicy, key string, want int64, why string) {
	e.t.Helper()
	if got := e.drain(s, p, key, want); got != want {
		e.t.Errorf("%s: key %q holds %d units, want %d", why, key, got, want)
	}
}

// describe prints asks for a failure's message.
func describe(asks []floodgate.Ask) string {
	var b strings.Builder
	b.WriteString("[")
	for i, a := range asks {
		if i > 0 {
			b.WriteString(" ")
		}
		shadow := ""
		if a.Shadow {
			shadow = " shadow"
		}
		fmt.Fprintf(&b, "{%q N=%d%s}", a.Key, a.N, shadow)
	}
	b.WriteString("]")
	return b.String()
}

// checkRule is Store.CheckRule: the one call of it, so that a rename is one
// line.
func checkRule(s floodgate.Store, algorithm string, r floodgate.Rule) error {
	return s.CheckRule(algorithm, r)
}

// settle is Settler.Settle: the one call of it, so that a change of its
// arguments' order is one line.
func settle(ctx context.Context, s floodgate.Settler, asks []floodgate.Ask, h *floodgate.Hold, each []floodgate.Decision) (floodgate.Decision, error) {
	return s.Settle(ctx, asks, each, h)
}
