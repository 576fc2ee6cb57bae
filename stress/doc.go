// Package stress holds floodgate's many-goroutine tests and nothing else.
//
// Every test runs with GOMAXPROCS well above the machine's cores and far
// more goroutines than that, against the lock-free token bucket and its
// mutex twin, and checks totals that must hold exactly: with a frozen
// clock, exactly the capacity is admitted per key; with a moving or stale
// clock, never more than capacity + rate × elapsed.
//
// Built with the "chaos" tag, the lock-free code yields between its loads
// and CASes, and the tests require that CAS retries actually happened, so a
// run that never contended cannot pass as proof. `make test` runs the short
// suite with and without the tag; `make stress` runs it for minutes with
// -long.
package stress
