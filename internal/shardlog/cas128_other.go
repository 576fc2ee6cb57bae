//go:build !amd64 && !arm64

package shardlog

// lockFreeLog is false where floodgate has no 16-byte compare-and-swap: the
// root package then serves "sliding_log" with MutexLog.
const lockFreeLog = false

// cas128 is never called where lockFreeLog is false.
func cas128(*entry, uint64, uint64, uint64, uint64) bool {
	panic("shardedlog: the lock-free sliding log needs a 16-byte CAS on this architecture")
}
