package atomicwindow

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reading"
	"github.com/floodgate-go/floodgate/internal/window"
)

// Window is a lock-free fixed window or sliding window counter. Make one
// with NewFixed or NewSliding; its methods are safe for concurrent use.
type Window struct {
	// state is the window. It is replaced when the clock has moved more
	// windows past the state's origin than its packed index holds (at
	// least 2^14 windows): the old state then retires, carrying what
	// still counts to its successor exactly, and every call moves on to
	// it.
	state atomic.Pointer[window.Window]
	base  reading.Base // the time the constructor was given: readings are Unix nanoseconds from it
}

// NewFixed returns a fixed window of limit per period, that has admitted
// nothing at now. The rule must have limit from 1 to 2^47 − 2 and
// period > 0; a rule outside that range is an error.
func NewFixed(limit int64, period time.Duration, now time.Time) (*Window, error) {
	return newWindow(window.Fixed, limit, period, now)
}

// NewSliding returns a sliding window counter of limit per period, that
// has admitted nothing at now. The rule must have limit from 1 to
// 8,388,606 and period > 0; a rule outside that range is an error.
func NewSliding(limit int64, period time.Duration, now time.Time) (*Window, error) {
	return newWindow(window.Sliding, limit, period, now)
}

func newWindow(kind window.Kind, limit int64, period time.Duration, now time.Time) (*Window, error) {
	p, err := window.NewParams(kind, limit, period)
	if err != nil {
		return nil, fmt.Errorf("atomicwindow: %w", err)
	}
	w := &Window{base: reading.New(now)}
	w.state.Store(window.New(p, w.base.Unix()))
	return w, nil
}

// Allow reports whether a request of cost 1 passes at now, and counts it
// if it does. It is AllowN's verdict alone, without the Decision's
// arithmetic: the call for a hot path.
func (w *Window) Allow(now time.Time) bool {
	t := w.base.At(now)
	for {
		s := w.state.Load()
		if allowed, live := s.Take(t, 1); live {
			return allowed
		}
		w.state.CompareAndSwap(s, s.Successor(t))
	}
}

// AllowN decides a request of cost n at now: if it fits the window, it is
// counted and the Decision is Allowed; otherwise nothing is counted, and
// RetryAfter is the wait until it would fit. A cost below 1 or above the
// limit can never pass. A reading from a window before the latest one
// counted is denied: that window's count is no longer held.
func (w *Window) AllowN(now time.Time, n int64) floodgate.Decision {
	t := w.base.At(now)
	for {
		s := w.state.Load()
		if d, live := s.AllowN(t, n); live {
			return answer(d)
		}
		w.state.CompareAndSwap(s, s.Successor(t))
	}
}

// Peek returns what AllowN(now, 1) would answer, and counts nothing.
func (w *Window) Peek(now time.Time) floodgate.Decision {
	t := w.base.At(now)
	for {
		s := w.state.Load()
		if d, live := s.Peek(t); live {
			return answer(d)
		}
		w.state.CompareAndSwap(s, s.Successor(t))
	}
}

// ChargeN counts n at now whatever the window holds: a cost already
// spent, which no refusal could undo. The window's count may pass the
// limit; the key then owes the excess, and refuses every request until
// it has aged out (the fixed window at the window's end, the sliding
// counter as the window slides past it). The Decision is the key after
// the charge: Allowed, Owed the whole units owed, and RetryAfter the wait
// until a request of cost 1 could pass.
//
// It returns an error, and charges nothing, for n < 1, and for a charge
// that would take the window's count past what the state holds (at least
// 256 times the limit for ordinary limits): that error wraps
// floodgate.ErrDebtBound, with the key as it stands in the Decision.
func (w *Window) ChargeN(now time.Time, n int64) (floodgate.Decision, error) {
	t := w.base.At(now)
	for {
		s := w.state.Load()
		if d, live, err := s.ChargeN(t, n); live {
			return answer(d), err // its errors name this package
		}
		w.state.CompareAndSwap(s, s.Successor(t))
	}
}

// Refund gives back n that an earlier AllowN or ChargeN at the time at
// counted, when the work they paid for was not done or cost less: it
// takes n from the count of the window at, exactly, in debt too, never
// below 0. A window that has since aged out of the rule holds nothing to
// give back, and is left as it is. n must be at least 1; any other n is
// an error, and nothing is given back.
func (w *Window) Refund(at time.Time, n int64) error {
	if n < 1 {
		return fmt.Errorf("atomicwindow: a refund must be at least 1, got %d", n)
	}
	t := w.base.At(at)
	for {
		s := w.state.Load()
		if s.Refund(t, n) {
			return nil
		}
		// The state moved its origin: its successor carries the counts.
		w.state.CompareAndSwap(s, s.Successor(t))
	}
}

// answer converts the implementation's Decision field by field.
func answer(d window.Decision) floodgate.Decision {
	return floodgate.Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Owed: d.Owed}
}
