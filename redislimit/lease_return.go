package redislimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// retire empties a batch that the next one replaced (what it held was too
// little for a request), and has the bookkeeper return what it held.
func (ls *leases) retire(st *leaseState, g *grant, now int64) {
	if ls.inline {
		ls.giveBackNow(st, g, now)
		return
	}
	ls.queueBack(ls.drain(st, g, now))
}

// retireUnits returns n units of g, which no longer holds them, as
// retire returns a grant's.
func (ls *leases) retireUnits(st *leaseState, g *grant, n, now int64) {
	b := ls.returnable(st, g, n, now)
	if ls.inline {
		ls.returnNow([]giveBack{b})
		return
	}
	ls.queueBack(b)
}

// enter counts a round trip of lease mode that Close must wait for, and
// says false once Close has begun: the caller then takes nothing, and
// hands what it would return to Close (see returnNow).
func (ls *leases) enter() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closing {
		return false
	}
	ls.flights++
	return true
}

// exit ends a round trip that enter counted.
func (ls *leases) exit() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.flights--
	if ls.flights == 0 && ls.idle != nil {
		close(ls.idle)
		ls.idle = nil
	}
}

// toClose hands back to Close, which has begun, units for it to return;
// once it has taken what it returns, they lapse. ls.mu is held.
func (ls *leases) toClose(back []giveBack) {
	if ls.finished {
		for _, b := range back {
			ls.lapsed.Add(b.units)
		}
		return
	}
	ls.late = append(ls.late, back...)
}

// returnNow returns units to Redis at once, as one of lease mode's round
// trips in flight, or hands them to Close if it has begun. What fails to
// go back while Close waits counts in Close's error.
func (ls *leases) returnNow(back []giveBack) {
	if len(back) == 0 {
		return
	}
	if !ls.enter() {
		ls.mu.Lock()
		ls.toClose(back)
		ls.mu.Unlock()
		return
	}
	defer ls.exit()
	for _, b := range back {
		b.p.flights.Add(1)
	}
	defer func() {
		for _, b := range back {
			b.p.flights.Add(-1)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), ls.s.set.timeout)
	defer cancel()
	if lost, err := ls.giveBack(ctx, back); lost > 0 {
		ls.mu.Lock()
		if ls.closing && !ls.finished {
			ls.lateLost += lost
			ls.lateErr = cmp.Or(ls.lateErr, err)
		}
		ls.mu.Unlock()
	}
}

// giveBack returns units to Redis (see Store.sendBack), counting them
// returned, or lapsed when they could not go back.
func (ls *leases) giveBack(ctx context.Context, back []giveBack) (int64, error) {
	var units int64
	for _, b := range back {
		units += b.units
	}
	lost, err := ls.s.sendBack(ctx, back)
	ls.returned.Add(units - lost)
	ls.lapsed.Add(lost)
	return lost, err
}

// giveBackNow returns g's units to Redis at once, or has Close return
// them if it has begun.
func (ls *leases) giveBackNow(st *leaseState, g *grant, now int64) {
	ls.returnNow(ls.appendBack(nil, st, g, now))
}

// drain empties g, which nobody can reach any more but a goroutine
// already in spend, and says what of it may go back to Redis at now: for
// the buckets, the units whose debt is not yet paid (the rest Redis has
// given back already); for the windows, every unit, to the window it was
// charged to (the script ignores a window the key no longer holds); for
// the log, every unit, to the entry stamped k (likewise).
func (ls *leases) drain(st *leaseState, g *grant, now int64) giveBack {
	u := g.units.Swap(retiredUnits)
	if g.decayed.Load() != 0 {
		ls.lapsed.Add(g.decayed.Swap(0))
	}
	return ls.returnable(st, g, u, now)
}

// returnable is what of u units of g goes back to Redis at now, which it
// counts; the rest, whose time passed (a bucket's debt paid), lapses.
func (ls *leases) returnable(st *leaseState, g *grant, u, now int64) giveBack {
	if u <= 0 {
		return giveBack{}
	}
	if g.windowEnd && now >= g.until {
		// Its window is over: the script would give nothing back to it
		// (a round trip for nothing), and the next window owes it nothing.
		ls.lapsed.Add(u)
		return giveBack{}
	}
	back := u
	if g.step > 0 {
		back = 0
		if g.top > now {
			back = min(u, (g.top-now)/g.step)
		}
	}
	ls.lapsed.Add(u - back)
	return giveBack{p: st.p, rkey: st.rkey, units: back, k: g.k, gen: g.gen}
}

// lapse empties g, which nobody can reach any more, and counts all it
// held as lapsed.
func (ls *leases) lapse(g *grant) {
	ls.lapsed.Add(max(0, g.units.Swap(retiredUnits)) + g.decayed.Swap(0))
}

// appendBack drains g, which nobody can reach any more, and appends what
// of it goes back to Redis.
func (ls *leases) appendBack(back []giveBack, st *leaseState, g *grant, now int64) []giveBack {
	if b := ls.drain(st, g, now); b.units > 0 {
		back = append(back, b)
	}
	return back
}

// closePolicy drops every key of p from lease mode and returns their
// unspent units to Redis, within Timeout: p is being closed, and takes
// no more leases. It first waits for the round trips in flight for p's
// keys (refills, renewals, returns), within Timeout, and takes p's units
// that wait to go back, so that when it returns every unit p leased is
// back in Redis. The error says how many units could not go back.
func (ls *leases) closePolicy(p *policy) error {
	timeout := ls.s.set.timeout
	for deadline := time.Now().Add(timeout); p.flights.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	var back []giveBack
	ls.qmu.Lock()
	kept := ls.back[:0]
	for _, b := range ls.back {
		if b.p == p {
			back = append(back, b)
		} else {
			kept = append(kept, b)
		}
	}
	clear(ls.back[len(kept):])
	ls.back = kept
	ls.qmu.Unlock()
	if p.states.Load() == 0 && len(back) == 0 {
		return nil
	}
	now, _ := ls.s.leaseNow()
	ls.states.Range(func(_ uint64, st *leaseState) bool {
		if st.p != p || !ls.drop(st) {
			return true
		}
		for _, slot := range []*atomic.Pointer[grant]{&st.g, &st.next} {
			if g := slot.Swap(nil); g != nil {
				back = ls.appendBack(back, st, g, now)
			}
		}
		return true
	})
	if len(back) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if lost, err := ls.giveBack(ctx, back); lost > 0 {
		return fmt.Errorf("redislimit: %d leased units could not be returned (the rule under-admits by as many until their time passes): %w", lost, err)
	}
	return nil
}

// close is the Store's Close in lease mode, once: it stops the
// bookkeeper and new round trips of lease mode, waits for those in
// flight (refills, renewals, returns) within Timeout, and then returns
// every unspent unit of every policy, theirs too, within another Timeout.
func (ls *leases) close() error {
	ls.once.Do(func() {
		ls.mu.Lock()
		ls.closing = true
		ls.closed.Store(true)
		var idle chan struct{}
		if ls.flights > 0 {
			idle = make(chan struct{})
			ls.idle = idle
		}
		ls.mu.Unlock()
		if ls.running {
			close(ls.stop)
			<-ls.done
		}
		timeout := ls.s.set.timeout
		if idle != nil {
			timer := time.NewTimer(timeout)
			select {
			case <-idle:
			case <-timer.C:
			}
			timer.Stop()
		}
		back := ls.drainAll()
		ls.mu.Lock()
		ls.finished = true
		stuck := ls.flights
		back = append(back, ls.late...)
		ls.late = nil
		lost, firstErr := ls.lateLost, ls.lateErr
		ls.mu.Unlock()
		ls.qmu.Lock()
		back = append(back, ls.back...)
		ls.back, ls.renew, ls.fresh = nil, nil, nil
		ls.qmu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		n, err := ls.giveBack(ctx, back)
		lost, firstErr = lost+n, cmp.Or(firstErr, err)
		var errs []error
		if lost > 0 {
			errs = append(errs, fmt.Errorf("redislimit: %d leased units could not be returned (the rule under-admits by as many until their time passes): %w", lost, firstErr))
		}
		if stuck > 0 {
			errs = append(errs, fmt.Errorf("redislimit: %d round trips of lease mode were still running after Timeout (%v); what they take lapses", stuck, timeout))
		}
		ls.err = errors.Join(errs...)
	})
	return ls.err
}

// drainAll empties every lease and says what goes back.
func (ls *leases) drainAll() []giveBack {
	now, _ := ls.s.leaseNow()
	var back []giveBack
	ls.states.Range(func(_ uint64, st *leaseState) bool {
		for _, slot := range []*atomic.Pointer[grant]{&st.g, &st.next} {
			if g := slot.Swap(nil); g != nil {
				back = ls.appendBack(back, st, g, now)
			}
		}
		return true
	})
	return back
}
