package floodgate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/keystate"
)

// Errors that Wait and WaitN return at once, consuming nothing. Test for
// them with errors.Is.
var (
	// ErrCannotWait: the limiter's algorithm cannot reserve. Waiting is
	// meaningful for the token and leaky buckets, whose state says when the
	// next token comes; a window has no such promise to make.
	ErrCannotWait = errors.New("floodgate: Wait needs the token or leaky bucket")
	// ErrExceedsCapacity: n is below 1 or above the capacity (or the
	// global cap's), so the request can never pass.
	ErrExceedsCapacity = errors.New("floodgate: the cost can never pass")
	// ErrExceedsDeadline: the request could pass only after the context's
	// deadline.
	ErrExceedsDeadline = errors.New("floodgate: the wait would pass the context's deadline")
)

// reserver is what a state that can reserve offers: the bucket states and
// their twins.
type reserver interface {
	ReserveN(now, n int64, maxWait time.Duration) (wait time.Duration, tat int64, ok, live bool)
	CancelReservation(tat, n int64) bool
}

// reservation is what WaitN took, so that a cancelled wait can give it
// back: the key's state (an object or an inline word) and the global
// cap's, each with the state it left. An inline word's is its slot until
// the wait begins, then its key's serial and the origin that wtat is
// relative to, as a held grant keeps them (see hold): a wait keeps no
// table.
type reservation struct {
	s      reserver
	tat    int64
	id     flat.ID
	t      *flat.Table
	i      int
	serial uint32
	origin int64
	wtat   uint64
	g      *bucket.Bucket
	gtat   int64
	n      int64
}

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN reserves n units for key and blocks until the request may pass,
// or ctx ends. It returns nil once the request has passed: like AllowN's
// admission, at the instant its units are there. Requests that wait pass
// in the order they reserved, and never more than the rule allows.
//
// It returns at once, consuming nothing, with ErrCannotWait for an
// algorithm other than the token and leaky buckets, ErrExceedsCapacity
// for an n that can never pass, ErrExceedsDeadline when the request could
// pass only after ctx's deadline, and ctx.Err() for a context already
// done. When ctx ends during the wait, WaitN gives back what it reserved
// and returns ctx.Err(); what it gives back is exact when no request for
// the key has reserved or passed since this one reserved (otherwise a
// later waiter was promised a time that counts on those units, and they
// stay spent: stricter, never looser). With a global cap, the cap is
// reserved too, and the wait is the longer of the two.
//
// With a ManualClock, the wait ends when that clock reaches the instant;
// with any other Clock it is a time.Timer. A CoarseClock's reading may
// then lag the wake by up to its resolution; the units were spent at
// reservation either way.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	if !l.reserves {
		return fmt.Errorf("%w, not %q", ErrCannotWait, l.name)
	}
	if capacity := l.rules.Load().capacity; n < 1 || n > capacity {
		return fmt.Errorf("%w: n = %d, capacity %d", ErrExceedsCapacity, n, capacity)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	limit := time.Duration(math.MaxInt64)
	if dl, ok := ctx.Deadline(); ok {
		limit = time.Until(dl)
	}
	now := l.now()
	r := reservation{n: n, i: -1}
	l.holdable()
	wait, ok := l.reserveKey(key, now, limit, &r)
	if !ok {
		return tooLong(wait, limit)
	}
	if g := l.global.Load(); g != nil {
		gw, ok := l.reserveGlobal(g, now, limit, &r)
		if !ok {
			l.cancelKey(&r)
			return tooLong(gw, limit)
		}
		wait = max(wait, gw)
	}
	if wait <= 0 {
		l.decided(true)
		return nil
	}
	if r.t != nil {
		r.serial, r.origin, r.t = r.t.Serial(r.i), r.t.Origin, nil
	}
	if err := l.sleep(ctx, now, wait); err != nil {
		l.cancelKey(&r)
		if r.g != nil {
			r.g.CancelReservation(r.gtat, r.n)
		}
		l.decided(false)
		return err
	}
	l.decided(true)
	return nil
}

// tooLong is the error of a reservation that could not be made.
func tooLong(wait, limit time.Duration) error {
	if wait == 0 { // not a wait: the cost never fits, or the reading is out of range
		return fmt.Errorf("%w for this limiter now", ErrExceedsCapacity)
	}
	return fmt.Errorf("%w: the request needs %v, the deadline is in %v", ErrExceedsDeadline, wait, limit)
}

// sleep waits for wait from now on the limiter's clock, or for ctx.
func (l *Limiter) sleep(ctx context.Context, now int64, wait time.Duration) error {
	if w, ok := l.clock.(waker); ok {
		at := now + int64(wait)
		if at < now {
			at = math.MaxInt64
		}
		wake, stop := w.wakeAt(at)
		select {
		case <-wake:
			return nil
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reserveKey reserves n for key's own state, following retirements and the
// table's marks as a grant does.
func (l *Limiter) reserveKey(key string, now int64, limit time.Duration, r *reservation) (time.Duration, bool) {
	a := answer{maxWait: limit}
	var ok bool
	r.id = l.hasher.ID(key)
	if l.kind == objects {
		var s keystate.State
		ok, s = l.onObject(r.id, now, opReserve, r.n, &a)
		r.s, r.tat = s.(reserver), a.stat
	} else {
		ok, r.t, r.i = l.onWord(r.id, now, opReserve, r.n, &a)
		r.wtat = a.tat
	}
	return a.wait, ok
}

// cancelKey gives the key's state back its reservation, if it still can.
func (l *Limiter) cancelKey(r *reservation) {
	switch {
	case r.s != nil:
		r.s.CancelReservation(r.tat, r.n)
	case r.t != nil:
		l.returnWord(r.id, r.t, r.i, 0, r.n, true, r.wtat)
	case r.serial != 0:
		l.returnHeld(r.id, r.serial, 0, r.n, true, r.wtat, r.origin)
	}
}
