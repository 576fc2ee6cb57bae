package shardlog

import "syscall"

// stepAside takes the calling thread off the CPU for stepAsideFor (the
// kernel's timer slack may add to it).
func stepAside() {
	ts := syscall.NsecToTimespec(int64(stepAsideFor))
	_ = syscall.Nanosleep(&ts, nil) // an interrupted sleep is a shorter one
}
