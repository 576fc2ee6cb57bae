package floodgate

import (
	"fmt"

	"github.com/floodgate-go/floodgate/shardedlog"
)

// Names of the window algorithms, and of their mutex twins (for comparison
// in tests and benchmarks). Rule.Burst has no meaning for a window: it must
// be 0 or equal to Limit.
const (
	FixedWindow         = "fixed_window"
	FixedWindowMutex    = "fixed_window_mutex"
	SlidingCounter      = "sliding_counter"
	SlidingCounterMutex = "sliding_counter_mutex"
)

func init() {
	mustRegister(FixedWindow, windowFactory(shardedlog.Fixed, false))
	mustRegister(FixedWindowMutex, windowFactory(shardedlog.Fixed, true))
	mustRegister(SlidingCounter, windowFactory(shardedlog.Sliding, false))
	mustRegister(SlidingCounterMutex, windowFactory(shardedlog.Sliding, true))
}

// windowBurst rejects a Burst that a window algorithm would have to ignore.
func windowBurst(r Rule) error {
	if r.Burst != 0 && r.Burst != r.Limit {
		return fmt.Errorf("a window admits Limit per Period; Burst must be 0 or Limit, got %d", r.Burst)
	}
	return nil
}

func windowFactory(kind shardedlog.Kind, mutex bool) Factory {
	return func(r Rule) (Algorithm, error) {
		if err := windowBurst(r); err != nil {
			return nil, err
		}
		p, err := shardedlog.NewParams(kind, r.Limit, r.Period)
		if err != nil {
			return nil, err
		}
		if mutex {
			return mutexWindows(p), nil
		}
		return lockFreeWindows(p), nil
	}
}

type lockFreeWindows shardedlog.Params

func (a lockFreeWindows) NewState(now int64) State {
	return (*windowState)(shardedlog.New(shardedlog.Params(a), now))
}

type windowState shardedlog.Window

func (s *windowState) w() *shardedlog.Window { return (*shardedlog.Window)(s) }

func (s *windowState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.w().AllowN(now, n)
	return fromCore(d), live
}

func (s *windowState) Take(now, n int64) (bool, bool) { return s.w().Take(now, n) }

func (s *windowState) Peek(now int64) (Decision, bool) {
	d, live := s.w().Peek(now)
	return fromCore(d), live
}

func (s *windowState) Refund(now, n int64) bool  { return s.w().Refund(now, n) }
func (s *windowState) RetireIdle(now int64) bool { return s.w().RetireIdle(now) }
func (s *windowState) Retire()                   { s.w().Retire() }
func (s *windowState) Successor(now int64) State { return (*windowState)(s.w().Successor(now)) }

type mutexWindows shardedlog.Params

func (a mutexWindows) NewState(now int64) State {
	return (*mutexWindowState)(shardedlog.NewMutex(shardedlog.Params(a), now))
}

type mutexWindowState shardedlog.MutexWindow

func (s *mutexWindowState) w() *shardedlog.MutexWindow { return (*shardedlog.MutexWindow)(s) }

func (s *mutexWindowState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.w().AllowN(now, n)
	return fromCore(d), live
}

func (s *mutexWindowState) Take(now, n int64) (bool, bool) { return s.w().Take(now, n) }

func (s *mutexWindowState) Peek(now int64) (Decision, bool) {
	d, live := s.w().Peek(now)
	return fromCore(d), live
}

func (s *mutexWindowState) Refund(now, n int64) bool  { return s.w().Refund(now, n) }
func (s *mutexWindowState) RetireIdle(now int64) bool { return s.w().RetireIdle(now) }
func (s *mutexWindowState) Retire()                   { s.w().Retire() }
func (s *mutexWindowState) Successor(now int64) State {
	return (*mutexWindowState)(s.w().Successor(now))
}

// SlidingLog names the exact sliding window log: a request of cost n is
// allowed if and only if the cost admitted in (now − Period, now] plus n is
// at most Limit. Lock-free on amd64 (CMPXCHG16B) and arm64 (CASPAL, or
// LDAXP/STLXP without LSE); on other architectures it is served by its
// mutex twin, SlidingLogMutex. Burst must be
// 0 or Limit; Limit is at most 4,194,302.
const (
	SlidingLog      = "sliding_log"
	SlidingLogMutex = "sliding_log_mutex"
)

func init() {
	mustRegister(SlidingLog, logFactory(!shardedlog.LockFreeLog()))
	mustRegister(SlidingLogMutex, logFactory(true))
}

func logFactory(mutex bool) Factory {
	return func(r Rule) (Algorithm, error) {
		if err := windowBurst(r); err != nil {
			return nil, err
		}
		p, err := shardedlog.NewLogParams(r.Limit, r.Period)
		if err != nil {
			return nil, err
		}
		if mutex {
			return mutexLogs(p), nil
		}
		return lockFreeLogs(p), nil
	}
}

type lockFreeLogs shardedlog.LogParams

func (a lockFreeLogs) NewState(now int64) State {
	return (*logState)(shardedlog.NewLog(shardedlog.LogParams(a), now))
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

type mutexLogs shardedlog.LogParams

func (a mutexLogs) NewState(now int64) State {
	return (*mutexLogState)(shardedlog.NewMutexLog(shardedlog.LogParams(a), now))
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

func (a mutexWindows) newSpent(now, spent int64) State {
	return (*mutexWindowState)(shardedlog.NewMutexSpent(shardedlog.Params(a), now, spent))
}

func (a lockFreeLogs) newSpent(now, spent int64) State {
	return (*logState)(shardedlog.NewLogSpent(shardedlog.LogParams(a), now, spent))
}

func (a mutexLogs) newSpent(now, spent int64) State {
	return (*mutexLogState)(shardedlog.NewMutexLogSpent(shardedlog.LogParams(a), now, spent))
}

func (s *mutexWindowState) Evict(now int64) int64 { return s.w().Evict(now) }
func (s *logState) Evict(now int64) int64         { return s.l().Evict(now) }
func (s *mutexLogState) Evict(now int64) int64    { return s.l().Evict(now) }
