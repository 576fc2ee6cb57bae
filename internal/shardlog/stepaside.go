package shardlog

import (
	"time"

	"github.com/floodgate-go/floodgate/internal/chaos"
)

// A call that loses its claim stepAsideAfter times in a row steps aside
// for about stepAsideFor before it reads the log again.
//
// Why. A lost claim is the ordinary price of two cores on one key: about
// one claim in seven loses when both hammer it. Losing twice in a row
// within one call is rare (one call in 4,000 to 20,000 on a hot key from
// two cores), and says that another goroutine is claiming the key
// faster than this one. On some hosts two busy vCPUs, or two hardware
// threads of one core, get less work done together than one gets alone:
// on the 2-core AMD EPYC VM of issue 24, for minutes at a time, two
// goroutines on 1,000 unshared keys made half the calls one makes. There
// a mutex beats any design that keeps both busy, because its waiters
// park and leave one vCPU to run alone. Stepping aside does the same for
// the rare call that keeps losing, without a lock: the winner runs alone
// for a while, and nobody ever waits for the one that stepped aside, so
// the log stays lock-free. (The sliding-log-amd run of 2026-12-03
// measured it: backoff that spins, and turn-taking, do not help; only
// taking the thread off the CPU does.)
//
// stepAside blocks the thread, not just the goroutine, because a Go
// timer's sleep of microseconds lasts a millisecond on an idle Linux
// process (netpoll's timeout is in milliseconds), and a parked goroutine
// leaves its vCPU busy if another is runnable. The sleep holds the P:
// the goroutines queued on it wait at most the sleep, and they are one in
// thousands of calls.
const (
	stepAsideAfter = 2
	stepAsideFor   = 20 * time.Microsecond
)

// steppedAside counts one more lost claim of a call in *lost and, at the
// stepAsideAfter-th, steps aside and reports true: the caller's view of
// the log is then long stale.
func steppedAside(lost *int) bool {
	if *lost++; *lost != stepAsideAfter {
		return false
	}
	chaos.Mark("log.stepaside")
	stepAside()
	return true
}
