package tsc

// read is RDTSC.
//
//go:noescape
func read() uint64

// cpuid executes CPUID with the given leaf and subleaf.
//
//go:noescape
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

var invariant = func() bool {
	if max, _, _, _ := cpuid(0x80000000, 0); max < 0x80000007 {
		return false
	}
	_, _, _, edx := cpuid(0x80000007, 0)
	return edx&(1<<8) != 0
}()
