//go:build chaos

package apitest

// Tagged needs a tag that the default build does not set.
func Tagged() {}
