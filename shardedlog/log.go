package shardedlog

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reading"
	"github.com/floodgate-go/floodgate/internal/shardlog"
)

// Log is an exact sliding window log. Make one with New; its methods are
// safe for concurrent use.
type Log struct {
	state state
	base  reading.Base // the time the constructor was given: readings are Unix nanoseconds from it
}

// state is the log: the lock-free one, or its twin behind a mutex where
// the machine has no 16-byte compare-and-swap. Neither retires unless it
// is told to, which a Log never does, so every answer is live.
type state interface {
	Take(now, n int64) (allowed, live bool)
	AllowN(now, n int64) (shardlog.Decision, bool)
	Peek(now int64) (shardlog.Decision, bool)
	ChargeN(now, n int64) (shardlog.Decision, bool, error)
}

// New returns a log of limit per period that holds nothing at now. The
// rule must have limit from 1 to 4,194,302 and period > 0; a rule
// outside that range is an error.
func New(limit int64, period time.Duration, now time.Time) (*Log, error) {
	p, err := shardlog.NewParams(limit, period)
	if err != nil {
		return nil, fmt.Errorf("shardedlog: %w", err)
	}
	l := &Log{base: reading.New(now)}
	if shardlog.LockFree() {
		l.state = shardlog.New(p, l.base.Unix())
	} else {
		l.state = shardlog.NewMutex(p, l.base.Unix())
	}
	return l, nil
}

// Allow reports whether a request of cost 1 passes at now, and admits it
// if it does. It is AllowN's verdict alone, without the Decision's
// arithmetic: the call for a hot path.
func (l *Log) Allow(now time.Time) bool {
	allowed, _ := l.state.Take(l.base.At(now), 1)
	return allowed
}

// AllowN decides a request of cost n at now: if the window holds room
// for it, it is admitted and the Decision is Allowed; otherwise nothing
// is admitted, and RetryAfter is the exact wait until enough has aged out
// for it to fit. A cost below 1 or above the limit can never pass: its
// RetryAfter is floodgate.Never.
func (l *Log) AllowN(now time.Time, n int64) floodgate.Decision {
	d, _ := l.state.AllowN(l.base.At(now), n)
	return answer(d)
}

// Peek returns what AllowN(now, 1) would answer, and admits nothing.
func (l *Log) Peek(now time.Time) floodgate.Decision {
	d, _ := l.state.Peek(l.base.At(now))
	return answer(d)
}

// ChargeN admits n at now whatever the window holds: a cost already
// spent, which no refusal could undo. The window may then hold more than
// the limit; the key owes the excess, and refuses every request until
// enough has aged out. The Decision is the key after the charge: Allowed,
// Owed the units owed, and RetryAfter the wait until a request of cost 1
// could pass.
//
// It returns an error, and charges nothing, for n < 1, and for a charge
// that would leave more in the window than 256 times the limit (at most
// 4,194,302): that error wraps floodgate.ErrDebtBound, with the key as it
// stands in the Decision.
func (l *Log) ChargeN(now time.Time, n int64) (floodgate.Decision, error) {
	d, _, err := l.state.ChargeN(l.base.At(now), n) // its errors name this package
	return answer(d), err
}

// answer converts the implementation's Decision field by field.
func answer(d shardlog.Decision) floodgate.Decision {
	return floodgate.Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Owed: d.Owed}
}
