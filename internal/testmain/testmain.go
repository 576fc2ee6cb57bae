// Package testmain is the TestMain of every test package in floodgate's
// modules. It checks, with go.uber.org/goleak, that no goroutine outlives
// the tests: no sweeper, coarse clock, TSC anchor, server or test
// goroutine may be left running by a test that forgot to stop it. It also
// applies the switches that make test-arm64 sets in the environment, and
// tells the longest tests which form to run (see Quick).
package testmain

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/testhook"
	"go.uber.org/goleak"
)

// ExclusivePairEnv, set to 1, runs the sliding log's 16-byte CAS on arm64's
// LDAXP/STLXP loop instead of CASPAL (make test-arm64 runs both).
const ExclusivePairEnv = "FLOODGATE_ARM64_LLSC"

// QuickEnv, set to 1, asks the longest tests for their quick form: make
// test sets it, so that the whole suite runs in minutes; make check, the
// full proof that CI runs, does not. A quick form keeps what its test
// proves (every algorithm and twin, on both registries, racing goroutines
// on GOMAXPROCS above the cores, and demand at least twice the supply) at
// a fraction of the volume.
const QuickEnv = "FLOODGATE_QUICK"

// Quick reports whether the tests run in their quick form (QuickEnv=1).
func Quick() bool { return os.Getenv(QuickEnv) == "1" }

// settle is how long Run waits for goroutines that are ending to end. A
// client's own goroutines may outlive its Close by a while: go-redis's
// pool, having failed to dial a server that a test stopped, sleeps a
// second before it sees that it was closed. goleak alone waits about half
// a second.
const settle = 5 * time.Second

// Run runs the package's tests, fails them if goroutines are left behind
// (beyond those opts ignore) settle after the tests end, and exits.
func Run(m *testing.M, opts ...goleak.Option) { RunThen(m, nil, opts...) }

// RunThen is Run, and calls then, if not nil, after the check and before
// the exit: for what the package's TestMain made, such as a binary its
// tests built, to go. (goleak.Cleanup is no option here: goleak.Find,
// which waits for goroutines that are ending, refuses it.)
func RunThen(m *testing.M, then func(), opts ...goleak.Option) {
	if os.Getenv(ExclusivePairEnv) == "1" && testhook.ExclusivePair != nil {
		testhook.ExclusivePair()
	}
	code := m.Run()
	if code == 0 {
		// A sweep of a Limiter or Store that a test dropped without
		// Close ends once the collector has found it unreachable.
		runtime.GC()
		deadline := time.Now().Add(settle)
		err := goleak.Find(opts...)
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			runtime.GC()
			err = goleak.Find(opts...)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on a successful test run: %v\n", err)
			code = 1
		}
	}
	if then != nil {
		then()
	}
	os.Exit(code)
}
