package floodgate

import (
	"github.com/floodgate-go/floodgate/internal/hook"
	"github.com/floodgate-go/floodgate/shardedlog"
)

// SlidingLog names the exact sliding window log: a request of cost n is
// allowed if and only if the cost admitted in (now − Period, now] plus n is
// at most Limit. Lock-free on amd64 (CMPXCHG16B) and arm64 (CASPAL, or
// LDAXP/STLXP without LSE); on other architectures it is served by its
// mutex twin. Burst must be 0 or Limit; Limit is at most 4,194,302.
const SlidingLog = "sliding_log"

func init() {
	mustRegister(SlidingLog, logFactory(!shardedlog.LockFree()))
	registerTwin(hook.SlidingLogMutex, logFactory(true))
}

func logFactory(mutex bool) Factory {
	return func(r Rule) (Algorithm, error) {
		if err := windowBurst(r); err != nil {
			return nil, err
		}
		p, err := shardedlog.NewParams(r.Limit, r.Period)
		if err != nil {
			return nil, err
		}
		if mutex {
			return mutexLogs(p), nil
		}
		return lockFreeLogs(p), nil
	}
}

type lockFreeLogs shardedlog.Params

func (a lockFreeLogs) NewState(now int64) State {
	return (*logState)(shardedlog.New(shardedlog.Params(a), now))
}

type logState shardedlog.Log

func (s *logState) l() *shardedlog.Log { return (*shardedlog.Log)(s) }

func (s *logState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.l().AllowN(now, n)
	return fromCore(d), live
}

func (s *logState) Take(now, n int64) (bool, bool) { return s.l().Take(now, n) }

func (s *logState) Peek(now int64) (Decision, bool) {
	d, live := s.l().Peek(now)
	return fromCore(d), live
}

func (s *logState) Refund(now, n int64) bool  { return s.l().Refund(now, n) }
func (s *logState) RetireIdle(now int64) bool { return s.l().RetireIdle(now) }
func (s *logState) Retire()                   { s.l().Retire() }
func (s *logState) Successor(now int64) State { return (*logState)(s.l().Successor(now)) }

type mutexLogs shardedlog.Params

func (a mutexLogs) NewState(now int64) State {
	return (*mutexLogState)(shardedlog.NewMutex(shardedlog.Params(a), now))
}

type mutexLogState shardedlog.MutexLog

func (s *mutexLogState) l() *shardedlog.MutexLog { return (*shardedlog.MutexLog)(s) }

func (s *mutexLogState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.l().AllowN(now, n)
	return fromCore(d), live
}

func (s *mutexLogState) Take(now, n int64) (bool, bool) { return s.l().Take(now, n) }

func (s *mutexLogState) Peek(now int64) (Decision, bool) {
	d, live := s.l().Peek(now)
	return fromCore(d), live
}

func (s *mutexLogState) Refund(now, n int64) bool  { return s.l().Refund(now, n) }
func (s *mutexLogState) RetireIdle(now int64) bool { return s.l().RetireIdle(now) }
func (s *mutexLogState) Retire()                   { s.l().Retire() }
func (s *mutexLogState) Successor(now int64) State { return (*mutexLogState)(s.l().Successor(now)) }

// The methods below let MaxKeys evict a key held out of line without
// giving it a fresh allowance when it returns (see spentAlgorithm).

func (a lockFreeLogs) newSpent(now, spent int64) State {
	return (*logState)(shardedlog.NewSpent(shardedlog.Params(a), now, spent))
}

func (a mutexLogs) newSpent(now, spent int64) State {
	return (*mutexLogState)(shardedlog.NewMutexSpent(shardedlog.Params(a), now, spent))
}

func (s *logState) Evict(now int64) int64      { return s.l().Evict(now) }
func (s *mutexLogState) Evict(now int64) int64 { return s.l().Evict(now) }
