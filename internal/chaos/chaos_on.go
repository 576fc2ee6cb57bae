//go:build chaos

package chaos

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
)

// Enabled reports whether the package was built with the chaos tag.
const Enabled = true

var retries atomic.Int64

// Yield gives up the processor on about one call in two, between a load
// and the CAS that depends on it.
func Yield() {
	if rand.Uint32()&1 == 0 {
		runtime.Gosched()
	}
}

// Retried records one CAS that lost to another writer.
func Retried() { retries.Add(1) }

// Retries returns how many CAS attempts have lost since the process started.
func Retries() int64 { return retries.Load() }
