//go:build race

package shardedlog

import "sync/atomic"

// storeHint is atomic.Uint64.Store under the race detector (see hint.go).
func storeHint(p *atomic.Uint64, v uint64) { p.Store(v) }
