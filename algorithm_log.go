package floodgate

import (
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

func logFactory(mutex bool) Factory {
	return func(r Rule) (Algorithm, error) {
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
func (a lockFreeLogs) convertSpent(spent, owed, at int64, to Algorithm) (int64, int64) {
	q := shardlog.Params(to.(lockFreeLogs))
	return (*shardlog.Params)(&a).ConvertSpent(spent, owed, at, &q)
}

func (a lockFreeLogs) NewState(now int64) State {
	return (*logState)(shardlog.New(shardlog.Params(a), now))
}

func (a lockFreeLogs) newSpent(now, spent, owed int64) State {
	return (*logState)(shardlog.NewSpent(shardlog.Params(a), now, spent, owed))
}

func (a lockFreeLogs) convert(s State, at int64) State {
	if c := s.(*logState).l().ConvertTo(at, shardlog.Params(a)); c != nil {
		return (*logState)(c)
	}
	return nil
}

type logState shardlog.Log

func (s *logState) l() *shardlog.Log { return (*shardlog.Log)(s) }

func (s *logState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.l().AllowN(now, n)
	return fromCore(d), live
}

func (s *logState) Take(now, n int64) (bool, bool) { return s.l().Take(now, n) }

func (s *logState) Peek(now int64) (Decision, bool) {
	d, live := s.l().Peek(now)
	return fromCore(d), live
}

func (s *logState) Refund(now, n int64) bool       { return s.l().Refund(now, n) }
func (s *logState) RetireIdle(now int64) bool      { return s.l().RetireIdle(now) }
func (s *logState) Retire()                        { s.l().Retire() }
func (s *logState) Evict(now int64) (int64, int64) { return s.l().Evict(now) }
func (s *logState) Successor(now int64) State      { return (*logState)(s.l().Successor(now)) }

// mutexLogs is the sliding log's mutex twin.
type mutexLogs shardlog.Params

func (a mutexLogs) traits() traits { return traits{kind: objects, form: mutexLogForm} }
func (a mutexLogs) convertSpent(spent, owed, at int64, to Algorithm) (int64, int64) {
	q := shardlog.Params(to.(mutexLogs))
	return (*shardlog.Params)(&a).ConvertSpent(spent, owed, at, &q)
}

func (a mutexLogs) NewState(now int64) State {
	return (*mutexLogState)(shardlog.NewMutex(shardlog.Params(a), now))
}

func (a mutexLogs) newSpent(now, spent, owed int64) State {
	return (*mutexLogState)(shardlog.NewMutexSpent(shardlog.Params(a), now, spent, owed))
}

func (a mutexLogs) convert(s State, at int64) State {
	if c := s.(*mutexLogState).l().ConvertTo(at, shardlog.Params(a)); c != nil {
		return (*mutexLogState)(c)
	}
	return nil
}

type mutexLogState shardlog.MutexLog

func (s *mutexLogState) l() *shardlog.MutexLog { return (*shardlog.MutexLog)(s) }

func (s *mutexLogState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.l().AllowN(now, n)
	return fromCore(d), live
}

func (s *mutexLogState) Take(now, n int64) (bool, bool) { return s.l().Take(now, n) }

func (s *mutexLogState) Peek(now int64) (Decision, bool) {
	d, live := s.l().Peek(now)
	return fromCore(d), live
}

func (s *mutexLogState) Refund(now, n int64) bool       { return s.l().Refund(now, n) }
func (s *mutexLogState) RetireIdle(now int64) bool      { return s.l().RetireIdle(now) }
func (s *mutexLogState) Retire()                        { s.l().Retire() }
func (s *mutexLogState) Evict(now int64) (int64, int64) { return s.l().Evict(now) }
func (s *mutexLogState) Successor(now int64) State      { return (*mutexLogState)(s.l().Successor(now)) }

func (s *logState) ChargeN(now, n int64) (Decision, bool, error) {
	d, live, err := s.l().ChargeN(now, n)
	return fromCore(d), live, err
}

func (s *mutexLogState) ChargeN(now, n int64) (Decision, bool, error) {
	d, live, err := s.l().ChargeN(now, n)
	return fromCore(d), live, err
}

// logGrant names the entry a log's grant made, for an exact refund of
// part of it (Reservation.Settle).
type logGrant = shardlog.Grant

// granter is a state whose grants name their entry, so that a refund of
// part of one is exact: the sliding log and its twin. Refund gives back a
// grant whole; refundGrant gives back m of it, and lapses (the key keeps
// the cost, stricter, never looser) once a later entry of the key was
// charged after it.
//
// settleGrant is refundGrant that also returns Peek(now)'s answer, read
// where the refund landed, and reports whether it did (else the caller
// peeks).
type granter interface {
	allowGrant(now, n int64) (Decision, logGrant, bool)
	refundGrant(g logGrant, m int64) bool
	settleGrant(g logGrant, m, now int64) (Decision, bool)
}

func (s *logState) allowGrant(now, n int64) (Decision, logGrant, bool) {
	d, g, live := s.l().AllowGrant(now, n)
	return fromCore(d), g, live
}

func (s *logState) refundGrant(g logGrant, m int64) bool {
	ok, err := s.l().RefundGrant(g, m)
	return ok && err == nil
}

func (s *logState) settleGrant(g logGrant, m, now int64) (Decision, bool) {
	d, answered, err := s.l().SettleGrant(g, m, now)
	return fromCore(d), answered && err == nil
}

func (s *mutexLogState) allowGrant(now, n int64) (Decision, logGrant, bool) {
	d, g, live := s.l().AllowGrant(now, n)
	return fromCore(d), g, live
}

func (s *mutexLogState) refundGrant(g logGrant, m int64) bool {
	ok, err := s.l().RefundGrant(g, m)
	return ok && err == nil
}

func (s *mutexLogState) settleGrant(g logGrant, m, now int64) (Decision, bool) {
	d, answered, err := s.l().SettleGrant(g, m, now)
	return fromCore(d), answered && err == nil
}
