//go:build race

package shardlog

import "sync/atomic"

// storeHint is atomic.Uint64.Store under the race detector, which would
// report the plain store the other builds use (see that build's
// storeHint).
func storeHint(p *atomic.Uint64, v uint64) { p.Store(v) }
