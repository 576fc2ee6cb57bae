package floodgate

import (
	"github.com/floodgate-go/floodgate/internal/keystate"
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

func windowFactory(kind window.Kind, mutex bool) factory {
	return func(r Rule) (algorithm, error) {
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
func (a lockFreeWindows) convertSpent(spent, owed, at int64, to algorithm) (int64, int64) {
	q := window.Params(to.(lockFreeWindows))
	return (*window.Params)(&a).ConvertSpent(spent, owed, at, &q)
}
func (a lockFreeWindows) params(rs *ruleSet) { rs.window = window.Params(a) }

func (a lockFreeWindows) newState(now int64) keystate.State {
	return (*keystate.Window)(window.New(window.Params(a), now))
}

// mutexWindows is the windows' mutex twin.
type mutexWindows window.Params

func (a mutexWindows) traits() traits { return traits{kind: objects, form: boxed} }
func (a mutexWindows) convertSpent(spent, owed, at int64, to algorithm) (int64, int64) {
	q := window.Params(to.(mutexWindows))
	return (*window.Params)(&a).ConvertSpent(spent, owed, at, &q)
}

func (a mutexWindows) newState(now int64) keystate.State {
	return (*keystate.MutexWindow)(window.NewMutex(window.Params(a), now))
}

func (a mutexWindows) newSpent(now, spent, owed int64) keystate.State {
	return (*keystate.MutexWindow)(window.NewMutexSpent(window.Params(a), now, spent, owed))
}

func (a mutexWindows) convert(s keystate.State, at int64) keystate.State {
	if c := (*window.MutexWindow)(s.(*keystate.MutexWindow)).ConvertTo(at, window.Params(a)); c != nil {
		return (*keystate.MutexWindow)(c)
	}
	return nil
}
