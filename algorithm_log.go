package floodgate

import (
	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/shardlog"
	"github.com/floodgate-go/floodgate/internal/testhook"
)

// The sliding log (see SlidingLog) and its mutex twin, which serves
// "sliding_log" on architectures without a 16-byte CAS. Both are objects,
// pointed at directly from their slots (see form): every state a log's
// Limiter makes is of the one type.

func init() {
	mustRegister(SlidingLog, logFactory(!shardlog.LockFree()))
	registerTwin(testhook.SlidingLogMutex, logFactory(true))
}

func logFactory(mutex bool) factory {
	return func(r Rule) (algorithm, error) {
		if err := windowBurst(r); err != nil {
			return nil, err
		}
		p, err := shardlog.NewParams(r.Limit, r.Period)
		if err != nil {
			return nil, err
		}
		if mutex {
			return mutexLogs(p), nil
		}
		return lockFreeLogs(p), nil
	}
}

// lockFreeLogs is the sliding_log algorithm: a shardlog.Log per key.
type lockFreeLogs shardlog.Params

func (a lockFreeLogs) traits() traits { return traits{kind: objects, form: logForm} }
func (a lockFreeLogs) convertSpent(spent, owed, at int64, to algorithm) (int64, int64) {
	q := shardlog.Params(to.(lockFreeLogs))
	return (*shardlog.Params)(&a).ConvertSpent(spent, owed, at, &q)
}

func (a lockFreeLogs) newState(now int64) keystate.State {
	return (*keystate.Log)(shardlog.New(shardlog.Params(a), now))
}

func (a lockFreeLogs) newSpent(now, spent, owed int64) keystate.State {
	return (*keystate.Log)(shardlog.NewSpent(shardlog.Params(a), now, spent, owed))
}

func (a lockFreeLogs) convert(s keystate.State, at int64) keystate.State {
	if c := (*shardlog.Log)(s.(*keystate.Log)).ConvertTo(at, shardlog.Params(a)); c != nil {
		return (*keystate.Log)(c)
	}
	return nil
}

// mutexLogs is the sliding log's mutex twin.
type mutexLogs shardlog.Params

func (a mutexLogs) traits() traits { return traits{kind: objects, form: mutexLogForm} }
func (a mutexLogs) convertSpent(spent, owed, at int64, to algorithm) (int64, int64) {
	q := shardlog.Params(to.(mutexLogs))
	return (*shardlog.Params)(&a).ConvertSpent(spent, owed, at, &q)
}

func (a mutexLogs) newState(now int64) keystate.State {
	return (*keystate.MutexLog)(shardlog.NewMutex(shardlog.Params(a), now))
}

func (a mutexLogs) newSpent(now, spent, owed int64) keystate.State {
	return (*keystate.MutexLog)(shardlog.NewMutexSpent(shardlog.Params(a), now, spent, owed))
}

func (a mutexLogs) convert(s keystate.State, at int64) keystate.State {
	if c := (*shardlog.MutexLog)(s.(*keystate.MutexLog)).ConvertTo(at, shardlog.Params(a)); c != nil {
		return (*keystate.MutexLog)(c)
	}
	return nil
}

// logGrant names the entry a log's grant made, for an exact refund of
// part of it (Reservation.Settle).
type logGrant = shardlog.Grant

// granter is a state whose grants name their entry, so that a refund of
// part of one is exact: the sliding log and its twin (keystate.Log and
// keystate.MutexLog). Refund gives back a grant whole; RefundGrant gives
// back m of it, and lapses (the key keeps the cost, stricter, never
// looser) once a later entry of the key was charged after it.
//
// SettleGrant is RefundGrant that also returns Peek(now)'s answer, read
// where the refund landed, and reports whether it did (else the caller
// peeks).
type granter interface {
	AllowGrant(now, n int64) (decision.Decision, logGrant, bool)
	RefundGrant(g logGrant, m int64) bool
	SettleGrant(g logGrant, m, now int64) (decision.Decision, bool)
}
