//go:build !chaos

package chaos

// Enabled reports whether the package was built with the chaos tag.
const Enabled = false

// Yield does nothing without the chaos tag.
func Yield() {}

// Retried does nothing without the chaos tag.
func Retried() {}

// Retries is always 0 without the chaos tag.
func Retries() int64 { return 0 }
