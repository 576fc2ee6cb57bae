package floodgate

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/floodgate-go/floodgate/internal/testhook"
)

// The built-in algorithms' names, for Config.Algorithm. Each is exact: no
// key ever passes more than its rule allows, at any concurrency.
const (
	// TokenBucket, the default, gives each key a bucket of Burst tokens
	// (Limit when Burst is 0), full at first, that refills continuously at
	// Limit per Period; a request of cost n passes if and only if the
	// bucket holds n tokens, and takes them. Its state is one atomic word,
	// a GCRA theoretical arrival time, in exact integer arithmetic.
	TokenBucket = "token_bucket"

	// LeakyBucket is the leaky bucket as a meter: a level that drains at
	// Limit per Period from capacity Burst (Limit when 0); a request of
	// cost n passes if and only if level + n ≤ capacity, and then the
	// level rises by n. Its decisions are the token bucket's for the same
	// rule and sequence (both are GCRA), so its lock-free form is the same
	// atomic word; its mutex twin is the meter in its textbook form.
	LeakyBucket = "leaky_bucket"

	// FixedWindow admits at most Limit in each window [kT, (k+1)T) of the
	// clock's scale: up to 2 × Limit can pass across a boundary. Burst must
	// be 0 or Limit.
	FixedWindow = "fixed_window"

	// SlidingCounter weights the previous window's count by the part of it
	// still inside the sliding window: prev × (T − e) / T + curr ≤ Limit,
	// where e is the time into the current window, in exact integers.
	// Burst must be 0 or Limit.
	SlidingCounter = "sliding_counter"

	// SlidingLog is the exact sliding window log: a request of cost n is
	// allowed if and only if the cost admitted in (now − Period, now] plus
	// n is at most Limit. Lock-free on amd64 (CMPXCHG16B) and arm64
	// (CASPAL, or LDAXP/STLXP without LSE); on other architectures its
	// mutex twin serves it. Burst must be 0 or Limit; Limit is at most
	// 4,194,302.
	SlidingLog = "sliding_log"
)

// Algorithm is a rate-limiting policy for one validated Rule. It makes the
// per-key states; the Limiter finds the state for a key and asks it.
type Algorithm interface {
	// NewState returns the state of a key that has taken nothing and is
	// full at now. A request whose reading is earlier than now (its clock
	// read was overtaken by another's) may find it owing the difference;
	// it must never find it holding more. The Limiter passes the later of
	// the request's time and the last eviction's, so that a key evicted
	// and created again cannot pass more than the evicted state allowed.
	NewState(now int64) State
}

// State is one key's state under an Algorithm. Every method is safe for
// concurrent use and must not block for long: it runs on the request path.
//
// A state can be retired: for eviction (RetireIdle), a reset (Retire), or
// by the state itself (say, to move its time origin). Retirement must be
// atomic with respect to grants: once a state reports itself retired it
// grants nothing, and no grant may land on it after it has retired. This is
// the rule that keeps a key from passing twice its limit while eviction
// races its requests. A caller that meets a retired state asks it for its
// Successor and goes on there.
type State interface {
	// AllowN admits a request of cost n at now if the rule allows it, and
	// consumes nothing on denial. live is false, and nothing changes, when
	// the state is retired. A cost below 1 or above the capacity is a
	// denial with RetryAfter == Never.
	AllowN(now, n int64) (d Decision, live bool)

	// Take is AllowN reduced to its verdict: the same admission and the
	// same state change, without computing the rest of the Decision.
	// Allow calls it on every request, so it should be the cheaper of
	// the two.
	Take(now, n int64) (allowed, live bool)

	// Peek returns what AllowN(now, 1) would, consuming nothing.
	Peek(now int64) (d Decision, live bool)

	// Refund gives back n taken by an earlier AllowN(now, n) on this
	// state, when a later check refused the request; now is that call's
	// time, so that a window algorithm knows which window to credit. It
	// reports false only when the state was retired carrying that grant to
	// its successor; the refund then belongs to Successor. A state retired
	// by a reset forgot the grant, and reports true.
	Refund(now, n int64) bool

	// RetireIdle retires the state if, at now, it answers exactly as a
	// fresh state would, and reports whether it did.
	RetireIdle(now int64) bool

	// Retire retires the state whatever it holds; its successor is fresh.
	Retire()

	// Successor returns the state that replaces a retired one. Every call
	// on one retired state returns the same State.
	Successor(now int64) State
}

// Factory builds the Algorithm for a rule. New has checked rule.Validate
// before the call; the factory returns an error for any rule it cannot
// represent exactly rather than clamping it.
type Factory func(rule Rule) (Algorithm, error)

var algorithms = struct {
	sync.RWMutex
	m map[string]Factory
}{m: map[string]Factory{}}

// Register makes an algorithm available to New under name. It returns an
// error for an empty name, a nil factory, or a name already taken.
//
// A registered algorithm's states are held out of line, one State per
// key, and it has what the State interface offers: Allow, AllowN, Peek,
// Reset, eviction of idle keys (EvictIdle and IdleTTL), the global cap and
// Limits. It lacks what the built-in algorithms do with their states'
// insides: New refuses it with MaxKeys > 0 (an evicted key could not be
// remembered, so a client could rotate its way back to a full
// allowance), SetRule refuses to change its rule, and Wait returns
// ErrCannotWait. Bound its keys with IdleTTL instead; a middleware over
// it needs its MaxKeys set to no bound.
func Register(name string, f Factory) error {
	if name == "" {
		return errors.New("floodgate: Register needs a name")
	}
	if f == nil {
		return fmt.Errorf("floodgate: Register(%q) with a nil Factory", name)
	}
	algorithms.Lock()
	defer algorithms.Unlock()
	if _, taken := algorithms.m[name]; taken || twins[name] != nil {
		return fmt.Errorf("floodgate: algorithm %q is already registered", name)
	}
	algorithms.m[name] = f
	return nil
}

// Algorithms returns the registered algorithm names, sorted.
func Algorithms() []string {
	algorithms.RLock()
	defer algorithms.RUnlock()
	names := make([]string, 0, len(algorithms.m))
	for n := range algorithms.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// twins are the built-in algorithms' mutex twins, by name (see
// internal/testhook): the references the tests hold each lock-free
// algorithm to. They are not offered to users: Algorithms does not list
// them, and New finds them only in a Config that the test hook marked.
// Written only at init.
var twins = map[string]Factory{}

// init gives the tests and the benchmark harness their way to the twins
// and to an algorithm outside a Limiter (see internal/testhook).
func init() {
	testhook.Twins = func(c any) any {
		cfg := c.(Config)
		cfg.twins = true
		return cfg
	}
	testhook.SameKeys = func(a, b any) { b.(*Limiter).hasher = a.(*Limiter).hasher }
	testhook.Algorithm = func(c any) (any, error) {
		cfg := c.(Config)
		f, err := lookup(cmp.Or(cfg.Algorithm, TokenBucket), cfg.twins)
		if err != nil {
			return nil, err
		}
		return build(cmp.Or(cfg.Algorithm, TokenBucket), f, cfg.Rule)
	}
}

// lookup finds the factory of the algorithm name; with twin set, the
// mutex twins' names are found too.
func lookup(name string, twin bool) (Factory, error) {
	if f, ok := twins[name]; ok {
		if twin {
			return f, nil
		}
		return nil, fmt.Errorf("floodgate: %q is the mutex twin of %q, a reference kept for floodgate's tests and benchmarks, not an algorithm to choose; use %q",
			name, strings.TrimSuffix(name, "_mutex"), strings.TrimSuffix(name, "_mutex"))
	}
	algorithms.RLock()
	f, ok := algorithms.m[name]
	algorithms.RUnlock()
	if !ok {
		return nil, fmt.Errorf("floodgate: unknown algorithm %q (registered: %s)", name, strings.Join(Algorithms(), ", "))
	}
	return f, nil
}

// CheckRule reports whether New would take algorithm ("" is
// TokenBucket) and rule, with the error New would return, without
// making a Limiter: a service that loads many rules checks them all
// before it applies any.
func CheckRule(algorithm string, rule Rule) error {
	name := cmp.Or(algorithm, TokenBucket)
	f, err := lookup(name, false)
	if err != nil {
		return err
	}
	_, err = build(name, f, rule)
	return err
}

// build makes the Algorithm of rule r with f, the factory of the
// algorithm name: the one place where New and SetRule both build it.
func build(name string, f Factory, r Rule) (Algorithm, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("floodgate: %w", err)
	}
	alg, err := f(r)
	if err != nil {
		return nil, fmt.Errorf("floodgate: algorithm %q cannot hold rule %+v: %w", name, r, err)
	}
	if alg == nil {
		return nil, fmt.Errorf("floodgate: algorithm %q returned no Algorithm", name)
	}
	return alg, nil
}

// builtin is what a built-in algorithm, and each mutex twin, tells the
// Limiter beyond NewState. Each answers in its own file (algorithm_*.go),
// so that adding an algorithm touches one file; the Limiter asks once,
// when it is built or its rule changes, never on a request. A registered
// algorithm is not a builtin: its states are boxed objects (see Register).
type builtin interface {
	Algorithm
	// traits says where the states live and what they can do.
	traits() traits
	// convertSpent is what a key that MaxKeys evicted under this rule,
	// remembered as new from spent on and owing owed beyond a spent state
	// (see sketch), is remembered as under the rule of to, the same
	// algorithm's, after a change at the instant at (see SetRule). A later
	// spent never converts to an earlier one.
	convertSpent(spent, owed, at int64, to Algorithm) (int64, int64)
}

// objectAlgorithm is a builtin whose states are objects, held out of line:
// MaxKeys and SetRule ask it for states of its own making.
type objectAlgorithm interface {
	builtin
	// newSpent makes the state of a key that MaxKeys evicted: new at now,
	// but answering as new only from spent on, and owing owed beyond a
	// spent state until then (see spentState).
	newSpent(now, spent, owed int64) State
	// convert retires s, in one atomic step with its grants, and returns
	// the state of this rule that holds what s held at at (see SetRule),
	// or nil if s had retired already, when its successor holds what it
	// carries. The retired state names the new one as its Successor, so
	// that a request that loaded s before the change moves on to the
	// converted state, never to a fresh one of the old rule.
	convert(s State, at int64) State
}

// wordAlgorithm is a builtin whose states are words in the flat table.
type wordAlgorithm interface {
	builtin
	// params gives the word engine this rule's parameters.
	params(rs *ruleSet)
}

// traits are a builtin's facts that the Limiter keeps in fields of its own.
type traits struct {
	kind     kind // where the states live
	form     form // what a slot points at, with objects
	reserves bool // the states reserve: WaitN
}

// traitsOf is alg's traits: a registered algorithm's states are boxed
// objects that cannot reserve.
func traitsOf(alg Algorithm) traits {
	if b, ok := alg.(builtin); ok {
		return b.traits()
	}
	return traits{kind: objects, form: boxed}
}

// mustRegister registers a built-in algorithm at init: a name taken twice
// is floodgate's own bug.
func mustRegister(name string, f Factory) {
	if err := Register(name, f); err != nil {
		panic(err)
	}
}

// registerTwin records the mutex twin of a built-in algorithm, at init.
func registerTwin(name string, f Factory) { twins[name] = f }

// windowBurst rejects a Burst that a window algorithm (or the log) would
// have to ignore.
func windowBurst(r Rule) error {
	if r.Burst != 0 && r.Burst != r.Limit {
		return fmt.Errorf("a window admits Limit per Period; Burst must be 0 or Limit, got %d", r.Burst)
	}
	return nil
}
