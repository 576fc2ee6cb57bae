//go:build !race

package shardlog

import (
	"sync/atomic"
	"unsafe"
)

// storeHint stores v into p with a plain store, where atomic.Uint64.Store
// is an exchange: a locked instruction on amd64, which an uncontended
// claim would otherwise pay on every grant. Only hints are stored this
// way: values that every reader checks against the slots, so a store seen
// late, or never, costs a scan and nothing else. An aligned 8-byte store
// is never torn; atomic.Uint64 holds its value at offset 0. The race build
// stores atomically instead, so that the detector sees no race.
func storeHint(p *atomic.Uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(p)) = v
}
