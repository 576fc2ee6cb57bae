package redislimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBudgetContext: a batch's context has its deadline, its first
// caller's values and never its cancellation; it is never done before
// its deadline, and then ends with DeadlineExceeded. Batches whose
// deadlines fall in one stretch share a Done channel; a deadline past
// Timeout gets context.WithDeadline's.
func TestBudgetContext(t *testing.T) {
	const d = 40 * time.Millisecond
	b := &budgets{d: d, grain: d / 2} // a wide stretch: the first two calls share it on a loaded machine too
	type key struct{}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	dl := time.Now().Add(d)
	ctx, cancel := b.with(parent, dl)
	defer cancel()
	if got, ok := ctx.Deadline(); !ok || !got.Equal(dl) {
		t.Fatalf("Deadline %v, %v; want %v", got, ok, dl)
	}
	if ctx.Value(key{}) != "v" {
		t.Fatal("the caller's value is lost")
	}
	cancelParent()
	if ctx.Err() != nil {
		t.Fatalf("Err %v before the deadline: the caller's cancellation reached the batch", ctx.Err())
	}
	ctx2, cancel2 := b.with(context.Background(), time.Now().Add(d))
	defer cancel2()
	if ctx2.Done() != ctx.Done() {
		t.Fatal("two batches a moment apart have stretches of their own: a timer each")
	}
	<-ctx.Done()
	if now := time.Now(); now.Before(dl) {
		t.Fatalf("done %v before its deadline", dl.Sub(now))
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v, want DeadlineExceeded", ctx.Err())
	}
	ctx3, cancel3 := b.with(context.Background(), time.Now().Add(d))
	defer cancel3()
	if ctx3.Done() == ctx.Done() || ctx3.Err() != nil {
		t.Fatal("a batch after the stretch ended got the ended one")
	}
	// An earlier deadline than the stretch's gets a stretch of its own,
	// which does not replace the later one.
	soon := time.Now().Add(d / 4)
	ctx4, cancel4 := b.with(context.Background(), soon)
	defer cancel4()
	if got, _ := ctx4.Deadline(); !got.Equal(soon) || ctx4.Done() == ctx3.Done() {
		t.Fatalf("Deadline %v, want %v, on a stretch of its own", got, soon)
	}
	ctx5, cancel5 := b.with(context.Background(), time.Now().Add(d))
	defer cancel5()
	if ctx5.Done() != ctx3.Done() {
		t.Fatal("an early deadline replaced the current stretch")
	}
	// Past Timeout: context.WithDeadline's.
	far := time.Now().Add(2 * d)
	ctx6, cancel6 := b.with(context.Background(), far)
	if _, ok := ctx6.(*budgetCtx); ok {
		t.Fatal("a deadline past Timeout shares a stretch")
	}
	cancel6()
	if ctx6.Err() == nil {
		t.Fatal("its cancel did not end it")
	}
}
