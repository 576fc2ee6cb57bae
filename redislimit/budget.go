package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// budgets gives a batch its deadline without a timer of its own:
// context.WithDeadline costs five allocations and a timer's start and
// stop, about half a microsecond, which is a percent of a round trip on
// loopback. The batches whose deadlines fall within one stretch of
// Timeout/8 share a context that ends when the stretch does, which one
// timer, started once for the stretch, ends. A batch's own context
// reports its exact deadline, which is what go-redis sets on the
// connection (ContextTimeoutEnabled, which New requires): the round trip
// is cut at the deadline, as with context.WithDeadline. Only what waits
// on the context's Done (a call waiting for a pooled connection) may
// wait up to Timeout/8 longer.
type budgets struct {
	d, grain time.Duration
	cur      atomic.Pointer[stretch]
	mu       sync.Mutex // one new stretch at a time
}

// stretch is the shared context of the batches whose deadlines fall in
// one stretch.
type stretch struct {
	ctx    context.Context
	cancel context.CancelFunc // never called: the timer ends ctx
	end    time.Time
}

// budgetCtx is one batch's context: its first caller's values, the
// stretch's Done and Err, and the batch's own deadline.
type budgetCtx struct {
	context.Context // the caller's, for its values
	stretch         context.Context
	deadline        time.Time
}

// Deadline is the batch's.
func (c *budgetCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done is closed when the stretch ends, at most Timeout/8 after Deadline.
func (c *budgetCtx) Done() <-chan struct{} { return c.stretch.Done() }

// Err is the stretch's: nil, then context.DeadlineExceeded.
func (c *budgetCtx) Err() error { return c.stretch.Err() }

// with returns a context with values' values (never its cancellation)
// that ends at deadline: a budgetCtx on the current stretch, with a
// cancel that does nothing, for a deadline at most Timeout away; else
// context.WithDeadline's.
func (b *budgets) with(values context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if values == nil {
		values = context.Background()
	}
	if b.grain <= 0 || time.Until(deadline) > b.d {
		return context.WithDeadline(context.WithoutCancel(values), deadline)
	}
	e := b.cur.Load()
	if e == nil || e.end.Before(deadline) || e.end.Sub(deadline) > b.grain {
		e = b.renew(deadline)
	}
	return &budgetCtx{Context: values, stretch: e.ctx, deadline: deadline}, func() {}
}

// renew returns a stretch that ends from deadline to deadline plus grain,
// starting one if the current stretch does not.
func (b *budgets) renew(deadline time.Time) *stretch {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.cur.Load(); e != nil && !e.end.Before(deadline) && e.end.Sub(deadline) <= b.grain {
		return e // another caller started it
	}
	e := &stretch{end: deadline.Add(b.grain)}
	e.ctx, e.cancel = context.WithDeadline(context.Background(), e.end)
	if cur := b.cur.Load(); cur == nil || cur.end.Before(e.end) {
		b.cur.Store(e) // an earlier deadline's stretch does not replace a later one
	}
	return e
}
