package floodgate

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/floodgate-go/floodgate/internal/keystate"
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

// algorithm is a rate-limiting policy for one validated Rule: it makes
// the per-key states (see keystate.Algorithm), which the Limiter holds as
// objects (see engine_objects.go) or, for the builtins whose states are
// words, only the reference limiter asks for (see testhook.Algorithm).
// Every built-in algorithm and mutex twin is one, and so is an algorithm
// that a test registers (registered).
type algorithm interface {
	newState(now int64) keystate.State
}

// factory builds the algorithm for a rule. New has checked rule.Validate
// before the call; the factory returns an error for any rule it cannot
// represent exactly rather than clamping it.
type factory func(rule Rule) (algorithm, error)

// algorithms are the algorithms New takes by name: the five built-in
// ones, and those that tests registered (see register).
var algorithms = struct {
	sync.RWMutex
	m map[string]factory
}{m: map[string]factory{}}

// register makes an algorithm available to New under name. It returns an
// error for an empty name, a nil factory, or a name already taken.
func register(name string, f factory) error {
	if name == "" {
		return errors.New("floodgate: register needs a name")
	}
	if f == nil {
		return fmt.Errorf("floodgate: register(%q) with a nil factory", name)
	}
	algorithms.Lock()
	defer algorithms.Unlock()
	if _, taken := algorithms.m[name]; taken || twins[name] != nil {
		return fmt.Errorf("floodgate: algorithm %q is already registered", name)
	}
	algorithms.m[name] = f
	return nil
}

// algorithmNames returns the names New takes, sorted: the twins' are not
// among them.
func algorithmNames() []string {
	algorithms.RLock()
	defer algorithms.RUnlock()
	names := make([]string, 0, len(algorithms.m))
	for n := range algorithms.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// registered is an algorithm that a test registered through
// testhook.Register: its states are the test's own keystate.States. It is
// not a builtin, so it has what the State protocol offers and no more:
// its states are boxed objects, and New refuses it with MaxKeys > 0 (an
// evicted key could not be remembered, so a client could rotate its way
// back to a full allowance), SetRule refuses to change its rule, Wait
// returns ErrCannotWait, and Charge, unless its states are
// keystate.Chargers, keystate.ErrCannotCharge.
type registered struct{ a keystate.Algorithm }

func (r registered) newState(now int64) keystate.State { return r.a.NewState(now) }

// twins are the built-in algorithms' mutex twins, by name (see
// internal/testhook): the references the tests hold each lock-free
// algorithm to. They are not offered to users: an unknown name's error
// does not list them, and New finds them only in a Config that the test
// hook marked. Written only at init.
var twins = map[string]factory{}

// init gives the tests and the benchmark harness their way to the twins,
// to an algorithm outside a Limiter, and to algorithms of their own (see
// internal/testhook).
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
		alg, err := build(cmp.Or(cfg.Algorithm, TokenBucket), f, cfg.Rule)
		if err != nil {
			return nil, err
		}
		return keystate.Func(alg.newState), nil
	}
	testhook.Register = func(name string, f any) error {
		fn, ok := f.(func(Rule) (keystate.Algorithm, error))
		if !ok && f != nil {
			return fmt.Errorf("floodgate: register(%q) with a %T, not a func(floodgate.Rule) (keystate.Algorithm, error)", name, f)
		}
		if fn == nil {
			return fmt.Errorf("floodgate: register(%q) with a nil factory", name)
		}
		return register(name, func(r Rule) (algorithm, error) {
			a, err := fn(r)
			if err != nil || a == nil {
				return nil, err // build says that a nil algorithm is none
			}
			return registered{a}, nil
		})
	}
}

// lookup finds the factory of the algorithm name; with twin set, the
// mutex twins' names are found too.
func lookup(name string, twin bool) (factory, error) {
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
		return nil, fmt.Errorf("floodgate: unknown algorithm %q (registered: %s)", name, strings.Join(algorithmNames(), ", "))
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

// build makes the algorithm of rule r with f, the factory of the
// algorithm name: the one place where New and SetRule both build it.
func build(name string, f factory, r Rule) (algorithm, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("floodgate: %w", err)
	}
	alg, err := f(r)
	if err != nil {
		return nil, fmt.Errorf("floodgate: algorithm %q cannot hold rule %+v: %w", name, r, err)
	}
	if alg == nil {
		return nil, fmt.Errorf("floodgate: algorithm %q returned no algorithm", name)
	}
	return alg, nil
}

// builtin is what a built-in algorithm, and each mutex twin, tells the
// Limiter beyond newState. Each answers in its own file (algorithm_*.go),
// so that adding an algorithm touches one file; the Limiter asks once,
// when it is built or its rule changes, never on a request. A registered
// algorithm is not a builtin: its states are boxed objects (see
// registered).
type builtin interface {
	algorithm
	// traits says where the states live and what they can do.
	traits() traits
	// convertSpent is what a key that MaxKeys evicted under this rule,
	// remembered as new from spent on and owing owed beyond a spent state
	// (see sketch), is remembered as under the rule of to, the same
	// algorithm's, after a change at the instant at (see SetRule). A later
	// spent never converts to an earlier one.
	convertSpent(spent, owed, at int64, to algorithm) (int64, int64)
}

// objectAlgorithm is a builtin whose states are objects, held out of line:
// MaxKeys and SetRule ask it for states of its own making.
type objectAlgorithm interface {
	builtin
	// newSpent makes the state of a key that MaxKeys evicted: new at now,
	// but answering as new only from spent on, and owing owed beyond a
	// spent state until then (see spentState).
	newSpent(now, spent, owed int64) keystate.State
	// convert retires s, in one atomic step with its grants, and returns
	// the state of this rule that holds what s held at at (see SetRule),
	// or nil if s had retired already, when its successor holds what it
	// carries. The retired state names the new one as its Successor, so
	// that a request that loaded s before the change moves on to the
	// converted state, never to a fresh one of the old rule.
	convert(s keystate.State, at int64) keystate.State
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
func traitsOf(alg algorithm) traits {
	if b, ok := alg.(builtin); ok {
		return b.traits()
	}
	return traits{kind: objects, form: boxed}
}

// mustRegister registers a built-in algorithm at init: a name taken twice
// is floodgate's own bug.
func mustRegister(name string, f factory) {
	if err := register(name, f); err != nil {
		panic(err)
	}
}

// registerTwin records the mutex twin of a built-in algorithm, at init.
func registerTwin(name string, f factory) { twins[name] = f }

// windowBurst rejects a Burst that a window algorithm (or the log) would
// have to ignore.
func windowBurst(r Rule) error {
	if r.Burst != 0 && r.Burst != r.Limit {
		return fmt.Errorf("a window admits Limit per Period; Burst must be 0 or Limit, got %d", r.Burst)
	}
	return nil
}
