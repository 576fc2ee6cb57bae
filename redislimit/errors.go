package redislimit

import (
	"context"
	"errors"
	"net"
	"time"

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
