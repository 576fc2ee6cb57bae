//go:build !chaos

package chaos

// Enabled reports whether the package was built with the chaos tag.
const Enabled = false

// Yield does nothing without the chaos tag.
func Yield() {}

// Retried does nothing without the chaos tag.
func Retried() {}

// Lost does nothing without the chaos tag.
func Lost(string) {}

// Mark does nothing without the chaos tag.
func Mark(string) {}

// Retries is always 0 without the chaos tag.
func Retries() int64 { return 0 }

// RetriesAt is always 0 without the chaos tag.
func RetriesAt(string) int64 { return 0 }
