package redislimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBudgetContext: a call whose caller's context cannot end gets a
// context whose Deadline is its own Timeout from now (or the caller's,
// if sooner) and whose values are the caller's; it is never done before
// that deadline, and then ends with DeadlineExceeded. Calls of one
// stretch share a Done channel; a caller whose context can end gets
// context.WithTimeout's, which its cancel ends.
func TestBudgetContext(t *testing.T) {
	const d = 40 * time.Millisecond
	b := &budgets{d: d, grain: d / 2} // a wide stretch: the first two calls share it on a loaded machine too
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	before := time.Now()
	ctx, cancel := b.with(parent, d)
	defer cancel()
	after := time.Now()
	dl, ok := ctx.Deadline()
	if !ok || dl.Before(before.Add(d)) || dl.After(after.Add(d)) {
		t.Fatalf("Deadline %v, %v; want within [%v, %v]", dl, ok, before.Add(d), after.Add(d))
	}
	if ctx.Value(key{}) != "v" {
		t.Fatal("the caller's value is lost")
	}
	if ctx.Err() != nil {
		t.Fatalf("Err %v before the deadline", ctx.Err())
	}
	ctx2, cancel2 := b.with(context.Background(), d)
	defer cancel2()
	if ctx2.Done() != ctx.Done() {
		t.Fatal("two calls a moment apart have stretches of their own: a timer each")
	}
	<-ctx.Done()
	if now := time.Now(); now.Before(dl) {
		t.Fatalf("done %v before its deadline", dl.Sub(now))
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v, want DeadlineExceeded", ctx.Err())
	}
	ctx3, cancel3 := b.with(context.Background(), d)
	defer cancel3()
	if ctx3.Done() == ctx.Done() || ctx3.Err() != nil {
		t.Fatal("a call after the stretch ended got the ended one")
	}

	// The caller's sooner deadline wins; a context that can end, or
	// another budget, goes to context.WithTimeout.
	soon := time.Now().Add(d / 4)
	ctx4, cancel4 := b.with(deadlineOnly{context.Background(), soon}, d)
	defer cancel4()
	if got, _ := ctx4.Deadline(); !got.Equal(soon) {
		t.Fatalf("Deadline %v, want the caller's %v", got, soon)
	}
	can, stop := context.WithCancel(context.Background())
	ctx5, cancel5 := b.with(can, d)
	if _, own := ctx5.(*budgetCtx); own {
		t.Fatal("a context that can end got a shared stretch, which its end would not reach")
	}
	stop()
	if ctx5.Err() == nil {
		t.Fatal("the caller's cancel did not end its call's context")
	}
	cancel5()
	ctx6, cancel6 := b.with(context.Background(), 2*d)
	defer cancel6()
	if _, own := ctx6.(*budgetCtx); own {
		t.Fatal("a budget other than Timeout got the Timeout's stretch")
	}
}

// deadlineOnly is a context with a deadline and no Done, as a caller's
// own type may be.
type deadlineOnly struct {
	context.Context
	at time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.at, true }
