// Package keystate holds one key's state as an object, and the protocol
// by which the object engine of floodgate's Limiter asks it (State): the
// sliding log's states and the mutex twins' live so, one object per key
// out of line, and so does an algorithm that floodgate's tests register
// through internal/testhook. The reference limiter (internal/reference)
// keeps every algorithm's states so, the lock-free buckets and windows
// included (the Limiter keeps theirs as words inline), and asks them
// through State alone.
//
// Each built-in state here is its algorithm package's type seen as a
// State: Bucket, MutexBucket and LeakyMeter (internal/bucket), Window
// and MutexWindow (internal/window), Log and MutexLog (internal/shardlog).
// The conversions are free: each is a named form of its package's type,
// and every package answers with one decision.Decision.
//
// Only this repository imports this package.
package keystate

import (
	"errors"

	"github.com/floodgate-go/floodgate/internal/decision"
)

// Algorithm is a rate-limiting policy for one validated rule: it makes
// the per-key states.
type Algorithm interface {
	// NewState returns the state of a key that has taken nothing and is
	// full at now. A request whose reading is earlier than now (its clock
	// read was overtaken by another's) may find it owing the difference;
	// it must never find it holding more. The Limiter passes the later of
	// the request's time and the last eviction's, so that a key evicted
	// and created again cannot pass more than the evicted state allowed.
	NewState(now int64) State
}

// Func is a function that makes states, seen as an Algorithm.
type Func func(now int64) State

// NewState returns f(now).
func (f Func) NewState(now int64) State { return f(now) }

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
	// denial with RetryAfter == decision.Never.
	AllowN(now, n int64) (d decision.Decision, live bool)

	// Take is AllowN reduced to its verdict: the same admission and the
	// same state change, without computing the rest of the Decision.
	// Allow calls it on every request, so it should be the cheaper of
	// the two.
	Take(now, n int64) (allowed, live bool)

	// Peek returns what AllowN(now, 1) would, consuming nothing.
	Peek(now int64) (d decision.Decision, live bool)

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

// Charger is a State that takes a charge it cannot refuse (see
// floodgate's Limiter.Charge). Every built-in state is one; a Limiter of
// an algorithm whose states are not returns ErrCannotCharge from Charge.
type Charger interface {
	// ChargeN takes n at now whatever the state holds, so that it may
	// owe, and returns the Decision after it. live is false, and nothing
	// changes, when the state is retired. For n below 1, or a charge past
	// what the state can owe (decision.ErrDebtBound), it returns an error
	// and charges nothing.
	ChargeN(now, n int64) (d decision.Decision, live bool, err error)
}

// ErrCannotCharge is Limiter.Charge's error on an algorithm whose states
// are not Chargers.
var ErrCannotCharge = errors.New("floodgate: the algorithm's states take no charge")
