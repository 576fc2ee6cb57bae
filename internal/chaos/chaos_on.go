//go:build chaos

package chaos

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Enabled reports whether the package was built with the chaos tag.
const Enabled = true

var (
	retries atomic.Int64
	sites   sync.Map // site name → *atomic.Int64
)

// Yield gives up the processor between a load and the CAS that depends on
// it, every time: with the goroutines of a stress test started together,
// another one then loads the same value before this one's CAS, so some
// CAS loses in every run and the retry paths are always exercised.
func Yield() {
	runtime.Gosched()
}

// Retried records one CAS that lost to another writer.
func Retried() { retries.Add(1) }

// Lost records one CAS that lost to another writer at the named site, so
// that a test can show that a given retry path was taken.
func Lost(site string) {
	retries.Add(1)
	c, ok := sites.Load(site)
	if !ok {
		c, _ = sites.LoadOrStore(site, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
}

// Mark records that the named site was reached (a path that losing
// CASes lead to), without counting a retry.
func Mark(site string) {
	c, ok := sites.Load(site)
	if !ok {
		c, _ = sites.LoadOrStore(site, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
}

// Retries returns how many CAS attempts have lost since the process started.
func Retries() int64 { return retries.Load() }

// RetriesAt returns how many CAS attempts have lost at the named site since
// the process started (for a site that Mark records, how often it was
// reached).
func RetriesAt(site string) int64 {
	if c, ok := sites.Load(site); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}
