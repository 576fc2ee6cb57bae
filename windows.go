package floodgate

import (
	"fmt"
	"github.com/floodgate-go/floodgate/atomicwindow"
	"github.com/floodgate-go/floodgate/internal/hook"
)

// Names of the window algorithms. Rule.Burst has no meaning for a window:
// it must be 0 or equal to Limit.
const (
	FixedWindow    = "fixed_window"
	SlidingCounter = "sliding_counter"
)

func init() {
	mustRegister(FixedWindow, windowFactory(atomicwindow.Fixed, false))
	registerTwin(hook.FixedWindowMutex, windowFactory(atomicwindow.Fixed, true))
	mustRegister(SlidingCounter, windowFactory(atomicwindow.Sliding, false))
	registerTwin(hook.SlidingCounterMutex, windowFactory(atomicwindow.Sliding, true))
}

// windowBurst rejects a Burst that a window algorithm would have to ignore.
func windowBurst(r Rule) error {
	if r.Burst != 0 && r.Burst != r.Limit {
		return fmt.Errorf("a window admits Limit per Period; Burst must be 0 or Limit, got %d", r.Burst)
	}
	return nil
}

func windowFactory(kind atomicwindow.Kind, mutex bool) Factory {
	return func(r Rule) (Algorithm, error) {
		if err := windowBurst(r); err != nil {
			return nil, err
		}
		p, err := atomicwindow.NewParams(kind, r.Limit, r.Period)
		if err != nil {
			return nil, err
		}
		if mutex {
			return mutexWindows(p), nil
		}
		return lockFreeWindows(p), nil
	}
}

type lockFreeWindows atomicwindow.Params

func (a lockFreeWindows) NewState(now int64) State {
	return (*windowState)(atomicwindow.New(atomicwindow.Params(a), now))
}

type windowState atomicwindow.Window

func (s *windowState) w() *atomicwindow.Window { return (*atomicwindow.Window)(s) }

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

type mutexWindows atomicwindow.Params

func (a mutexWindows) NewState(now int64) State {
	return (*mutexWindowState)(atomicwindow.NewMutex(atomicwindow.Params(a), now))
}

type mutexWindowState atomicwindow.MutexWindow

func (s *mutexWindowState) w() *atomicwindow.MutexWindow { return (*atomicwindow.MutexWindow)(s) }

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

// The methods below let MaxKeys evict a key held out of line without
// giving it a fresh allowance when it returns (see spentAlgorithm).

func (a mutexWindows) newSpent(now, spent int64) State {
	return (*mutexWindowState)(atomicwindow.NewMutexSpent(atomicwindow.Params(a), now, spent))
}

func (s *mutexWindowState) Evict(now int64) int64 { return s.w().Evict(now) }
