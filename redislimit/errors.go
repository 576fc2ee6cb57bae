package redislimit

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/redis/go-redis/v9"
)

// errKind is the kind of a failed round trip (see Store.failed).
type errKind uint8

const (
	otherErr errKind = iota
	timeoutErr
	keyErr
)

// failed counts a round trip that failed with err, by its kind, and
// returns the kind.
func (s *Store) failed(err error) errKind {
	s.errs.Add(1)
	switch {
	case keyError(err):
		s.keyErrs.Add(1)
		return keyErr
	case isTimeout(err):
		s.timeouts.Add(1)
		return timeoutErr
	}
	s.otherErrs.Add(1)
	return otherErr
}

// serverStates are the error replies that say the server, not one key,
// cannot serve now: they count against the breaker. Every other error
// reply concerns the key the script ran on.
var serverStates = []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "TRYAGAIN",
	"OOM", "NOREPLICAS", "MISCONF", "NOPERM", "NOAUTH", "WRONGPASS", "NOSCRIPT", "UNBLOCKED", "CROSSSLOT"}

// keyError reports whether err is Redis's error reply about one key's
// data: the server answered, and it is up.
func keyError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range serverStates {
		if redis.HasErrorPrefix(err, p) {
			return false
		}
	}
	return true
}

// isTimeout reports whether err is a call running out of time.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// callerEnded returns the caller's context's error if the call failed
// because that context ended first: it was cancelled, or its deadline,
// earlier than the limiter's own budget (which ends at budget), has
// passed. A deadline is read from the clock rather than from ctx.Err,
// because the client's read deadline and the context's timer fire apart,
// and the read may fail a moment before the context says it is done.
func callerEnded(ctx context.Context, budget time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(budget) && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// unreachedError is FailError's error: Redis's own error, cause, or with
// open the one that last failed a call before the breaker opened.
type unreachedError struct {
	cause   error
	open    bool
	timeout bool
}

func (e *unreachedError) Error() string {
	if e.open {
		return "redislimit: Redis did not decide: the circuit breaker is open, after " + e.cause.Error()
	}
	return "redislimit: Redis did not decide: " + e.cause.Error()
}

// Unwrap is floodgate.ErrUnreached, and Redis's error unless it is a
// context's (the Store's own budget ran out: no caller's deadline).
func (e *unreachedError) Unwrap() []error {
	if errors.Is(e.cause, context.DeadlineExceeded) || errors.Is(e.cause, context.Canceled) {
		return []error{floodgate.ErrUnreached}
	}
	return []error{floodgate.ErrUnreached, e.cause}
}

// Timeout reports whether Redis ran out of Timeout (or, with the breaker
// open, whether the failure that opened it did).
func (e *unreachedError) Timeout() bool { return e.timeout }

// errNoAnswer is the cause of a call answered by the FailureMode with no
// failure of its own to name: the breaker opened before any was seen.
var errNoAnswer = errors.New("no answer")
