// Package sweeper runs the background sweep of floodgate's Limiter,
// LocalStore and inflight.Limiter: a pass over their keys on every tick,
// until Close stops it or the owner is collected. The goroutine holds its
// owner weakly, so that an owner dropped without Close (IdleTTL's default
// starts a sweep) is collected, and its sweep ends with it.
package sweeper

import (
	"runtime"
	"time"
	"weak"
)

// Start runs pass(owner) on every tick of tick, in a goroutine of its
// own, until stop is closed or owner is collected, and returns the
// channel closed when that goroutine has ended; it then stops ticker, if
// not nil. pass must not hold owner otherwise (a closure over it would
// keep it alive): it receives owner for the length of one pass.
func Start[T any](owner *T, tick <-chan time.Time, ticker *time.Ticker, stop <-chan struct{}, pass func(*T)) <-chan struct{} {
	swept, gone := make(chan struct{}), make(chan struct{})
	runtime.AddCleanup(owner, func(gone chan struct{}) { close(gone) }, gone)
	w := weak.Make(owner)
	go func() {
		defer close(swept)
		if ticker != nil {
			defer ticker.Stop()
		}
		for {
			select {
			case <-stop:
				return
			case <-gone:
				return
			case <-tick:
			}
			o := w.Value()
			if o == nil {
				return
			}
			pass(o)
		}
	}()
	return swept
}
