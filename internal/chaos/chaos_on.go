//go:build chaos

package chaos

import (
	"runtime"
	"sync/atomic"
)

// Enabled reports whether the package was built with the chaos tag.
const Enabled = true

var retries atomic.Int64

// Yield gives up the processor between a load and the CAS that depends on
// it, every time: with the goroutines of a stress test started together,
// another one then loads the same value before this one's CAS, so some
// CAS loses in every run and the retry paths are always exercised.
func Yield() {
	runtime.Gosched()
}

// Retried records one CAS that lost to another writer.
func Retried() { retries.Add(1) }

// Retries returns how many CAS attempts have lost since the process started.
func Retries() int64 { return retries.Load() }
