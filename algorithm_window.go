package floodgate

import (
	"github.com/floodgate-go/floodgate/internal/testhook"
	"github.com/floodgate-go/floodgate/internal/window"
)

// The fixed window and the sliding counter (see FixedWindow and
// SlidingCounter), with their mutex twins. Both lock-free forms are an
// internal/window word in the flat table.

func init() {
	mustRegister(FixedWindow, windowFactory(window.Fixed, false))
	registerTwin(testhook.FixedWindowMutex, windowFactory(window.Fixed, true))
	mustRegister(SlidingCounter, windowFactory(window.Sliding, false))
	registerTwin(testhook.SlidingCounterMutex, windowFactory(window.Sliding, true))
}

func windowFactory(kind window.Kind, mutex bool) Factory {
	return func(r Rule) (Algorithm, error) {
		if err := windowBurst(r); err != nil {
			return nil, err
		}
		p, err := window.NewParams(kind, r.Limit, r.Period)
		if err != nil {
			return nil, err
		}
		if mutex {
			return mutexWindows(p), nil
		}
		return lockFreeWindows(p), nil
	}
}

// lockFreeWindows is the fixed_window and sliding_counter algorithm: an
// internal/window word per key, inline in the flat table.
type lockFreeWindows window.Params

func (a lockFreeWindows) traits() traits { return traits{kind: windowWords} }
func (a lockFreeWindows) convertSpent(spent, owed, at int64, to Algorithm) (int64, int64) {
	q := window.Params(to.(lockFreeWindows))
	return (*window.Params)(&a).ConvertSpent(spent, owed, at, &q)
}
func (a lockFreeWindows) params(rs *ruleSet) { rs.window = window.Params(a) }

func (a lockFreeWindows) NewState(now int64) State {
	return (*windowState)(window.New(window.Params(a), now))
}

// windowState is an window.Window seen as a State: the lock-free
// window out of line, as the reference limiter of the tests holds it.
type windowState window.Window

func (s *windowState) w() *window.Window { return (*window.Window)(s) }

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

// mutexWindows is the windows' mutex twin.
type mutexWindows window.Params

func (a mutexWindows) traits() traits { return traits{kind: objects, form: boxed} }
func (a mutexWindows) convertSpent(spent, owed, at int64, to Algorithm) (int64, int64) {
	q := window.Params(to.(mutexWindows))
	return (*window.Params)(&a).ConvertSpent(spent, owed, at, &q)
}

func (a mutexWindows) NewState(now int64) State {
	return (*mutexWindowState)(window.NewMutex(window.Params(a), now))
}

func (a mutexWindows) newSpent(now, spent, owed int64) State {
	return (*mutexWindowState)(window.NewMutexSpent(window.Params(a), now, spent, owed))
}

func (a mutexWindows) convert(s State, at int64) State {
	if c := s.(*mutexWindowState).w().ConvertTo(at, window.Params(a)); c != nil {
		return (*mutexWindowState)(c)
	}
	return nil
}

type mutexWindowState window.MutexWindow

func (s *mutexWindowState) w() *window.MutexWindow { return (*window.MutexWindow)(s) }

func (s *mutexWindowState) AllowN(now, n int64) (Decision, bool) {
	d, live := s.w().AllowN(now, n)
	return fromCore(d), live
}

func (s *mutexWindowState) Take(now, n int64) (bool, bool) { return s.w().Take(now, n) }

func (s *mutexWindowState) Peek(now int64) (Decision, bool) {
	d, live := s.w().Peek(now)
	return fromCore(d), live
}

func (s *mutexWindowState) Refund(now, n int64) bool       { return s.w().Refund(now, n) }
func (s *mutexWindowState) RetireIdle(now int64) bool      { return s.w().RetireIdle(now) }
func (s *mutexWindowState) Retire()                        { s.w().Retire() }
func (s *mutexWindowState) Evict(now int64) (int64, int64) { return s.w().Evict(now) }
func (s *mutexWindowState) Successor(now int64) State {
	return (*mutexWindowState)(s.w().Successor(now))
}

func (s *windowState) ChargeN(now, n int64) (Decision, bool, error) {
	d, live, err := s.w().ChargeN(now, n)
	return fromCore(d), live, err
}

func (s *mutexWindowState) ChargeN(now, n int64) (Decision, bool, error) {
	d, live, err := s.w().ChargeN(now, n)
	return fromCore(d), live, err
}
