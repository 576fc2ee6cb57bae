package storekit

import (
	"errors"

	"github.com/floodgate-go/floodgate"
)

// Machine is one rate policy's algorithm and rule as steps over encoded
// key states, for a backend that keeps each key's state as bytes and
// replaces them with a compare-and-swap (memcached's gets and cas,
// DynamoDB's conditional writes, etcd's transactions, an SQL UPDATE
// ... WHERE): the backend reads a key's bytes, calls one step, and
// writes the bytes that the step returns if they are still the ones it
// read, retrying the step on a conflict. Each step answers exactly as
// floodgate's own Limiter answers for the same algorithm, rule and
// sequence of requests.
//
// A state's bytes begin with a version byte and carry the algorithm and
// the rule they were written under. A state written under another rule
// of the same algorithm (a rule changed on one replica, a rolling
// deploy) is converted to the Machine's rule at the step's instant,
// keeping what was used, as the Limiter's SetRule converts. A state of
// another algorithm, a truncated or corrupt state, or an unknown
// version is an error that says which; no bytes make a step panic.
//
// Time is the step's now, in nanoseconds on a clock that every replica
// shares (the wall clock's Unix nanoseconds, in practice). A reading
// earlier than the state's latest is answered as floodgate's states
// answer one (never more than the later state allows). A replica whose
// clock runs ahead of the others by δ can admit early what the rule
// gives back with time: a bucket refills δ early (up to Limit × δ /
// Period more than the rule within a Period), and a window's boundary,
// or the end of a sliding log's period, moves up to δ early.
//
// A Machine is immutable and safe for concurrent use.
type Machine struct {
	algorithm string
	rule      floodgate.Rule
}

// errNotImplemented is the stubs' error, until the steps land.
var errNotImplemented = errors.New("storekit: Machine is not implemented yet")

// NewMachine returns the Machine of the built-in algorithm named (one of
// floodgate.TokenBucket, LeakyBucket, FixedWindow, SlidingCounter and
// SlidingLog; "" is TokenBucket) for rule, with the error that
// floodgate.New returns for a rule the algorithm cannot hold, and an
// error naming an algorithm that is not built in.
func NewMachine(algorithm string, rule floodgate.Rule) (*Machine, error) {
	return nil, errNotImplemented
}

// Take decides a request of cost n at now against state, as a
// Limiter's AllowN: it admits n if the rule allows, and consumes nothing
// when it refuses. A cost below 1 or above the capacity is a refusal
// whose RetryAfter is floodgate.Never, not an error.
//
// A nil or empty state is a key never seen: a fresh state made at now.
// next is the new state appended to dst (which may be nil; a dst with
// room for it is not reallocated), or nil when the step changed nothing
// (a refusal), so that the backend need not write. at says where the
// grant lies, for a later Refund of part of it: the backend keeps it
// (as floodgate.HoldPart's At) and gives it back to Refund. The error
// is the state's, when its bytes cannot be read.
func (m *Machine) Take(state []byte, now int64, n int64, dst []byte) (d floodgate.Decision, next []byte, at int64, err error) {
	return floodgate.Decision{}, nil, 0, errNotImplemented
}

// Charge takes n from state at now whatever it holds, as a Limiter's
// ChargeN: the key may then owe (Decision.Owed). A cost below 1, or a
// debt beyond what the key can owe (an error wrapping
// floodgate.ErrDebtBound), is an error, and nothing is changed. next is
// as Take's.
func (m *Machine) Charge(state []byte, now int64, n int64, dst []byte) (d floodgate.Decision, next []byte, err error) {
	return floodgate.Decision{}, nil, errNotImplemented
}

// Refund gives back to state n of what an earlier Take, which returned
// at, took from this key: what remains of a reservation settled for
// less (Reservation.Settle), or a whole grant rolled back when another
// policy of the same request refused. It gives back exactly what the
// Limiter gives back for the same algorithm; a sliding log's refund of
// a grant lapses, as the Limiter's does, once a later entry of the key
// was charged after it (the key keeps the cost: stricter, never
// looser). The Decision is the key's after the refund, as Settle
// answers. next is as Take's.
func (m *Machine) Refund(state []byte, now int64, at, n int64, dst []byte) (d floodgate.Decision, next []byte, err error) {
	return floodgate.Decision{}, nil, errNotImplemented
}

// Peek is what Take(state, now, 1) would answer, consuming nothing.
func (m *Machine) Peek(state []byte, now int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, errNotImplemented
}

// Fresh returns the instant, on the steps' clock, from which state
// answers every step exactly as a fresh state would (its debts paid):
// the backend may forget the key's state from then on (its expiry), and
// must not before. A nil or empty state is fresh at any instant.
func (m *Machine) Fresh(state []byte) (int64, error) {
	return 0, errNotImplemented
}
