// Package skipped is under testdata: no line.
package skipped

// Skipped is not in any package of the module.
func Skipped() {}
