//go:build !amd64

package tsc

const invariant = false

func read() uint64 { return 0 }
