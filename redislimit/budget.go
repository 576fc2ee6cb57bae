package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// budgets gives a call whose caller's context cannot end (a Background,
// or values on one) its Timeout without a timer of its own:
// context.WithTimeout costs a call five allocations and a timer's start
// and stop, about half a microsecond, which is a percent of a round
// trip on loopback. The calls begun within one stretch of Timeout/8
// share a context that ends Timeout after the stretch does, which one
// timer, started once for the stretch, ends. A call's own context
// reports its exact deadline, now plus Timeout, which is what go-redis
// sets on the connection (ContextTimeoutEnabled, which New requires): the
// round trip is cut at Timeout, as with context.WithTimeout. Only what
// waits on the context's Done (a call waiting for a pooled connection, or
// for another caller's batch) may wait up to Timeout/8 longer.
type budgets struct {
	d, grain time.Duration
	cur      atomic.Pointer[stretch]
	mu       sync.Mutex // one new stretch at a time
}

// stretch is the shared context of the calls begun in one stretch.
type stretch struct {
	ctx    context.Context
	cancel context.CancelFunc // never called: the timer ends ctx
	end    time.Time
}

// budgetCtx is one call's context: the caller's values, the stretch's Done
// and Err, and the call's own deadline.
type budgetCtx struct {
	context.Context // the caller's, for its values
	stretch         context.Context
	deadline        time.Time
}

// Deadline is the call's: its caller's if that is sooner.
func (c *budgetCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done is closed when the stretch ends, at most Timeout/8 after Deadline.
func (c *budgetCtx) Done() <-chan struct{} { return c.stretch.Done() }

// Err is the stretch's: nil, then context.DeadlineExceeded.
func (c *budgetCtx) Err() error { return c.stretch.Err() }

// with returns ctx bounded by d: for a ctx that cannot end and d the
// Limiter's Timeout, a budgetCtx on the current stretch, with a cancel
// that does nothing; else context.WithTimeout's.
func (b *budgets) with(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() != nil || d != b.d || b.grain <= 0 {
		return context.WithTimeout(ctx, d)
	}
	deadline := time.Now().Add(d)
	e := b.cur.Load()
	if e == nil || e.end.Before(deadline) {
		e = b.renew(deadline)
	}
	return &budgetCtx{Context: ctx, stretch: e.ctx, deadline: deadline}, func() {}
}

// renew returns a stretch that ends from deadline to deadline plus grain,
// starting one if the current stretch ends too soon.
func (b *budgets) renew(deadline time.Time) *stretch {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.cur.Load(); e != nil && !e.end.Before(deadline) {
		return e // another caller started it
	}
	e := &stretch{end: deadline.Add(b.grain)}
	e.ctx, e.cancel = context.WithDeadline(context.Background(), e.end)
	b.cur.Store(e)
	return e
}
