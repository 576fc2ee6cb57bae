package floodgate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/floodgate-go/floodgate/atomicbucket"
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

// TokenBucket is the name of the default algorithm: a lock-free token bucket
// per key, exact in integer arithmetic (see the package documentation).
const TokenBucket = "token_bucket"

var algorithms = struct {
	sync.RWMutex
	m map[string]Factory
}{m: map[string]Factory{}}

// Register makes an algorithm available to New under name. It returns an
// error for an empty name, a nil factory, or a name already taken.
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
// internal/hook): the references the tests hold each lock-free algorithm
// to. They are not offered to users: Algorithms does not list them, and
// New finds them only in a Config that internal/hook marked. Written only
// at init.
var twins = map[string]Factory{}

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

// bucketFactory is the Factory of an algorithm whose states are buckets
// on atomicbucket.Params: the rule is checked once, here.
func bucketFactory(make func(atomicbucket.Params) Algorithm) Factory {
	return func(r Rule) (Algorithm, error) {
		p, err := atomicbucket.NewParams(r.Limit, r.Period, r.Burst)
		if err != nil {
			return nil, err
		}
		return make(p), nil
	}
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
