package memcachelimit

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate-go/floodgate"
)

// unreachedError is FailError's error: memcached's own error, cause, or
// with open the one that last failed a call before the breaker opened.
type unreachedError struct {
	cause   error
	open    bool
	timeout bool
}

func (e *unreachedError) Error() string {
	if e.open {
		return "memcachelimit: memcached did not decide: the circuit breaker is open, after " + e.cause.Error()
	}
	return "memcachelimit: memcached did not decide: " + e.cause.Error()
}

// Unwrap is floodgate.ErrUnreached, and memcached's error unless it is
// a context's.
func (e *unreachedError) Unwrap() []error {
	if errors.Is(e.cause, context.DeadlineExceeded) || errors.Is(e.cause, context.Canceled) {
		return []error{floodgate.ErrUnreached}
	}
	return []error{floodgate.ErrUnreached, e.cause}
}

// Timeout reports whether memcached ran out of time (or, with the
// breaker open, whether the failure that opened it did).
func (e *unreachedError) Timeout() bool { return e.timeout }

// errNoAnswer is the cause named when the breaker opened before any
// failure was seen.
var errNoAnswer = errors.New("no answer")

// unreachedErr is FailError's error for a call that memcached did not
// decide for the reason cause.
func (s *Store) unreachedErr(cause error) error {
	if cause != errBreakerOpen {
		return &unreachedError{cause: cause, timeout: isTimeout(cause)}
	}
	e := &unreachedError{cause: errNoAnswer, open: true}
	if f := s.breaker.last.Load(); f != nil {
		e.cause, e.timeout = f.err, f.timeout
	}
	return e
}

// refusedUnreached is the refusal of FailClosed and FailError under a
// policy of capacity c.
func (s *Store) refusedUnreached(c int64) floodgate.Decision {
	return floodgate.Decision{Unreached: true, Limit: c, RetryAfter: time.Duration(s.breaker.every)}
}
