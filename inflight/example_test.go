package inflight_test

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/floodgate-go/floodgate/inflight"
)

// At most two requests per client at once: a third is refused while two
// are held, and served once one of them ends.
func Example() {
	l, err := inflight.New(inflight.Config{Limit: 2})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	first, _ := l.TryAcquire("client-1")
	second, _ := l.TryAcquire("client-1")
	_, ok := l.TryAcquire("client-1")
	fmt.Println("third while two are held:", ok)

	first.Release()
	third, ok := l.TryAcquire("client-1")
	fmt.Println("third after one ended:", ok)

	second.Release()
	third.Release()
	fmt.Println("held at the end:", l.Held("client-1"))
	// Output:
	// third while two are held: false
	// third after one ended: true
	// held at the end: 0
}

// Acquire waits in the client's queue, at most Queue deep, until a slot
// is free or the context ends.
func ExampleLimiter_Acquire() {
	l, err := inflight.New(inflight.Config{Limit: 1, Queue: 8})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	held, _ := l.TryAcquire("client-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(ctx, "client-1") // nothing releases: the wait ends with ctx
	fmt.Println(err)

	done := make(chan error)
	go func() {
		slot, err := l.Acquire(context.Background(), "client-1")
		defer slot.Release()
		done <- err
	}()
	for l.Waiting("client-1") == 0 {
		runtime.Gosched()
	}
	held.Release() // handed to the waiter
	fmt.Println(<-done)
	// Output:
	// context deadline exceeded
	// <nil>
}
