//go:build !linux

package shardlog

import "runtime"

// stepAside yields the processor to other goroutines: off Linux the log
// does not sleep the thread (see stepAsideAfter).
func stepAside() { runtime.Gosched() }
