// Package heaptest weighs the live heap for the tests that bound what
// floodgate keeps in memory.
package heaptest

import "runtime"

// Live returns the bytes of live objects, after two collections (the
// second frees what the first left in sync.Pool's victim caches).
func Live() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
