package storekit

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/shardlog"
	"github.com/floodgate-go/floodgate/internal/window"
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
// keeping what was used, as the Limiter's SetRule converts; a step that
// converts returns the converted state to write, and a Refund that meets
// a state of another rule gives nothing back, as the Limiter drops a
// refund after SetRule. A state of another algorithm, a truncated or
// corrupt state, or an unknown version is an error that says which; no
// bytes make a step panic.
//
// Time is the step's now, in nanoseconds on a clock that every replica
// shares (the wall clock's Unix nanoseconds, in practice). A reading
// earlier than the state's latest is answered as floodgate's states
// answer one: never with more than the later state allows. A replica
// whose clock runs ahead of the others by δ can admit early what the
// rule gives back with time: a bucket refills δ early (up to
// Limit × δ / Period more than the rule within a Period), and a window's
// boundary, or the end of a sliding log's period, moves up to δ early.
//
// A Machine is safe for concurrent use.
type Machine struct {
	name string
	alg  byte
	rule floodgate.Rule
	bp   bucket.Params
	wp   window.Params
	lp   shardlog.Params
	// The twins the steps load states into, kept for the next step:
	// *bucket.MutexBucket, *bucket.LeakyMutex, *window.MutexWindow, and
	// *shardlog.MutexLog with their entries' buffers.
	buckets, meters, windows, logs sync.Pool
}

// version is the first byte of every state this package writes.
const version = 1

// headerBytes is the length of a state's header: the version, the
// algorithm, and the rule's Limit, Period and Burst.
const headerBytes = 2 + 3*8

// The algorithms, as a state's second byte names them.
const (
	algTokenBucket byte = 1 + iota
	algLeakyBucket
	algFixedWindow
	algSlidingCounter
	algSlidingLog
)

var algNames = [...]string{
	algTokenBucket:    floodgate.TokenBucket,
	algLeakyBucket:    floodgate.LeakyBucket,
	algFixedWindow:    floodgate.FixedWindow,
	algSlidingCounter: floodgate.SlidingCounter,
	algSlidingLog:     floodgate.SlidingLog,
}

// NewMachine returns the Machine of the built-in algorithm named (one of
// floodgate.TokenBucket, LeakyBucket, FixedWindow, SlidingCounter and
// SlidingLog; "" is TokenBucket) for rule, with the error that
// floodgate.New returns for a rule the algorithm cannot hold, and an
// error naming an algorithm that is not built in.
func NewMachine(algorithm string, rule floodgate.Rule) (*Machine, error) {
	name := cmp.Or(algorithm, floodgate.TokenBucket)
	var alg byte
	for i, n := range algNames {
		if n == name && n != "" {
			alg = byte(i)
		}
	}
	if err := floodgate.CheckRule(name, rule); err != nil {
		return nil, err
	}
	if alg == 0 {
		return nil, fmt.Errorf("storekit: NewMachine: %q is not one of floodgate's built-in algorithms", name)
	}
	m := &Machine{name: name, alg: alg, rule: rule}
	if err := m.params(rule, &m.bp, &m.wp, &m.lp); err != nil {
		return nil, fmt.Errorf("storekit: NewMachine: %w", err) // CheckRule took it: not reached
	}
	return m, nil
}

// params builds the parameters of m's algorithm for rule r, as
// floodgate's constructors build them, into the one of bp, wp and lp
// that the algorithm uses.
func (m *Machine) params(r floodgate.Rule, bp *bucket.Params, wp *window.Params, lp *shardlog.Params) error {
	if err := r.Validate(); err != nil {
		return err
	}
	var err error
	switch m.alg {
	case algTokenBucket, algLeakyBucket:
		*bp, err = bucket.NewParams(r.Limit, r.Period, r.Burst)
		return err
	}
	if r.Burst != 0 && r.Burst != r.Limit {
		return fmt.Errorf("a window admits Limit per Period; Burst must be 0 or Limit, got %d", r.Burst)
	}
	switch m.alg {
	case algFixedWindow:
		*wp, err = window.NewParams(window.Fixed, r.Limit, r.Period)
	case algSlidingCounter:
		*wp, err = window.NewParams(window.Sliding, r.Limit, r.Period)
	default:
		*lp, err = shardlog.NewParams(r.Limit, r.Period)
	}
	return err
}

// op is a step.
type op uint8

const (
	opTake op = iota
	opCharge
	opRefund
	opPeek
	opFresh
)

// step is one key's state read: fresh (no state), or under rule (the
// state's own, which may not be the Machine's), its body after the
// header.
type step struct {
	fresh   bool
	foreign bool // written under another rule: converted, refunds dropped
	rule    floodgate.Rule
	body    []byte
}

// read checks state's header against m.
func (m *Machine) read(state []byte) (step, error) {
	if len(state) == 0 {
		return step{fresh: true, rule: m.rule}, nil
	}
	switch {
	case state[0] != version:
		return step{}, fmt.Errorf("storekit: a state of version %d; this Machine reads version %d", state[0], version)
	case len(state) < headerBytes:
		return step{}, fmt.Errorf("storekit: a state of %d bytes, truncated: its header alone is %d", len(state), headerBytes)
	case int(state[1]) >= len(algNames) || state[1] == 0:
		return step{}, fmt.Errorf("storekit: a state names algorithm %d, which is none", state[1])
	case state[1] != m.alg:
		return step{}, fmt.Errorf("storekit: a state of algorithm %q, not this Machine's %q", algNames[state[1]], m.name)
	}
	r := floodgate.Rule{
		Limit:  int64(binary.BigEndian.Uint64(state[2:])),
		Period: time.Duration(binary.BigEndian.Uint64(state[10:])),
		Burst:  int64(binary.BigEndian.Uint64(state[18:])),
	}
	return step{foreign: r != m.rule, rule: r, body: state[headerBytes:]}, nil
}

// header appends m's header to dst.
func (m *Machine) header(dst []byte) []byte {
	dst = append(dst, version, m.alg)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.rule.Limit))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.rule.Period))
	return binary.BigEndian.AppendUint64(dst, uint64(m.rule.Burst))
}

// corrupt wraps an error of a state's body.
func corrupt(err error) error { return fmt.Errorf("storekit: a corrupt state: %w", err) }

// foreignParams builds the parameters of the rule a state was written
// under, for its conversion.
func (m *Machine) foreignParams(s *step, bp *bucket.Params, wp *window.Params, lp *shardlog.Params) error {
	if err := m.params(s.rule, bp, wp, lp); err != nil {
		return corrupt(fmt.Errorf("written under rule %+v, which %q cannot hold: %w", s.rule, m.name, err))
	}
	return nil
}

// result is what a step returns besides its state.
type result struct {
	d   decision.Decision
	at  int64
	err error
}

// Take decides a request of cost n at now against state, as a
// Limiter's AllowN: it admits n if the rule allows, and consumes nothing
// when it refuses. A cost below 1 or above the capacity is a refusal
// whose RetryAfter is floodgate.Never, not an error.
//
// A nil or empty state is a key never seen: a fresh state made at now.
// next is the new state appended to dst (which may be nil; a dst with
// room for it is not reallocated, and the step then allocates nothing),
// or nil when the step changed none of the state's bytes (a refusal,
// say), so that the backend need not write. A key never seen is written
// even when refused, as the state made at now, since the Limiter makes
// the key then too: a later reading from an earlier clock finds it so.
// at says where the grant
// lies, for a later Refund of part of it: the backend keeps it (as
// floodgate.HoldPart's At) and gives it back to Refund. It is now for
// the buckets and the windows, and the running cost of the grant's entry
// for the sliding log (begun at the instant the key's state was made, so
// that a state made again after the backend forgot the key does not
// take an earlier grant's refund). The error is the state's, when its
// bytes cannot be read.
func (m *Machine) Take(state []byte, now int64, n int64, dst []byte) (d floodgate.Decision, next []byte, at int64, err error) {
	r, next := m.run(state, now, opTake, n, 0, dst)
	return public(r.d), next, r.at, r.err
}

// Charge takes n from state at now whatever it holds, as a Limiter's
// ChargeN: the key may then owe (Decision.Owed). A cost below 1, or a
// debt beyond what the key can owe (an error wrapping
// floodgate.ErrDebtBound), is an error, and nothing is changed (next is
// nil, and a key never seen stays unwritten). next is as Take's.
func (m *Machine) Charge(state []byte, now int64, n int64, dst []byte) (d floodgate.Decision, next []byte, err error) {
	if n < 1 {
		return floodgate.Decision{}, nil, fmt.Errorf("floodgate: a charge of %d: a cost must be at least 1", n)
	}
	r, next := m.run(state, now, opCharge, n, 0, dst)
	return public(r.d), next, r.err
}

// Refund gives back to state n of what an earlier Take, which returned
// at, took from this key: what remains of a reservation settled for
// less (Reservation.Settle), or a whole grant rolled back when another
// policy of the same request refused. It gives back exactly what the
// Limiter gives back for the same algorithm: the buckets, all of it; the
// windows, to the window the grant was taken in, while the state still
// holds it; the sliding log, while the grant's entry is the key's newest
// and gave back nothing yet, else the refund lapses (the key keeps the
// cost: stricter, never looser). A state written under another rule, or
// none (the backend forgot the key), gives nothing back; a backend whose
// policy changed its rule drops a refund of a grant taken under another
// rule (HoldPart.Gen tells), as the Limiter drops one after SetRule,
// since the state may have been converted since. The Decision is
// the key's after the refund, as Settle answers it: Allowed, with
// Remaining what is left. An n of 0 gives nothing back and answers so; a
// negative n is an error. next is as Take's.
func (m *Machine) Refund(state []byte, now int64, at, n int64, dst []byte) (d floodgate.Decision, next []byte, err error) {
	if n < 0 {
		return floodgate.Decision{}, nil, fmt.Errorf("storekit: a refund of %d: a cost cannot be negative", n)
	}
	r, next := m.run(state, now, opRefund, n, at, dst)
	if r.err != nil {
		return floodgate.Decision{}, nil, r.err
	}
	d = public(r.d)
	if d.Allowed {
		d.Remaining++ // a Peek's answer, its request of 1 not taken
	}
	d.Allowed = true
	return d, next, nil
}

// Peek is what Take(state, now, 1) would answer, consuming nothing.
func (m *Machine) Peek(state []byte, now int64) (floodgate.Decision, error) {
	r, _ := m.run(state, now, opPeek, 1, 0, nil)
	return public(r.d), r.err
}

// Fresh returns the instant, on the steps' clock, from which state
// answers every step exactly as a fresh state would (its debts paid):
// the backend may forget the key's state from then on (its expiry), and
// must not before. It may lie later than the first such instant, never
// earlier: the sliding counter's, for a key in debt, lies a window
// later. A nil or empty state is fresh at any instant (math.MinInt64).
// A state written under another rule is fresh when it is under that
// rule, as floodgate's idle sweep finds it.
func (m *Machine) Fresh(state []byte) (int64, error) {
	if len(state) == 0 {
		return math.MinInt64, nil
	}
	r, _ := m.run(state, 0, opFresh, 0, 0, nil)
	return r.at, r.err
}

// public is floodgate's Decision of the twins' d.
func public(d decision.Decision) floodgate.Decision {
	return floodgate.Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Owed: d.Owed}
}

// errNoState is the error of a twin that will not write its state: one
// retired, which no step leaves behind.
var errNoState = errors.New("storekit: the step left a retired state (floodgate's bug)")

// run is every step: it reads state, applies o, and writes the state
// after it to dst if it changed.
func (m *Machine) run(state []byte, now int64, o op, n, at int64, dst []byte) (result, []byte) {
	s, err := m.read(state)
	if err != nil {
		return result{err: err}, nil
	}
	var r result
	var next []byte
	switch m.alg {
	case algTokenBucket:
		r, next = m.runBucket(&s, now, o, n, dst)
	case algLeakyBucket:
		r, next = m.runLeaky(&s, now, o, n, dst)
	case algFixedWindow, algSlidingCounter:
		r, next = m.runWindow(&s, now, o, n, at, dst)
	default:
		r, next = m.runLog(&s, now, o, n, at, dst)
	}
	if next != nil && bytes.Equal(next[len(dst):], state) {
		next = nil // a refund that found nothing to give back, say
	}
	return r, next
}

// changed reports whether a step must write its state: one it made or
// converted, or one its op changed.
func changed(s *step, o op, moved bool, r *result) bool {
	switch {
	case r.err != nil || o == opPeek || o == opFresh:
		return false
	case o == opRefund:
		return s.foreign || moved // its Decision is a Peek's
	}
	return s.fresh || s.foreign || moved || r.d.Allowed
}
