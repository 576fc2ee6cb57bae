package outage

import (
	"context"
	"testing"
)

type otherKey struct{}

// TestMark: a marked context carries one Mark, which a context made from
// it (with or without its cancellation) shares; an unmarked one carries
// none, and a nil Mark is never down. The parent's values and
// cancellation pass through the mark.
func TestMark(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), otherKey{}, "v"))
	if m := From(parent); m != nil || m.Down() {
		t.Fatalf("an unmarked context has a Mark: %v", m)
	}
	From(parent).SetDown() // a nil Mark: nothing happens

	ctx := With(parent)
	m := From(ctx)
	if m == nil || m.Down() {
		t.Fatalf("a new mark: %v", m)
	}
	if With(ctx) != ctx {
		t.Fatal("With on a marked context made a second Mark")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	detached := context.WithoutCancel(child)
	for name, c := range map[string]context.Context{"child": child, "detached": detached} {
		if From(c) != m {
			t.Fatalf("%s: another Mark", name)
		}
		if c.Value(otherKey{}) != "v" {
			t.Fatalf("%s: the parent's value is lost", name)
		}
	}
	m.SetDown()
	if !From(detached).Down() {
		t.Fatal("the detached context does not see the mark down")
	}
	cancel()
	<-child.Done() // the parent's cancellation reaches through the mark
	if detached.Err() != nil {
		t.Fatal("the detached context was cancelled")
	}
}
