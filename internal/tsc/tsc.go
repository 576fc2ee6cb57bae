// Package tsc reads the processor's time stamp counter, where the processor
// says it is invariant: it ticks at one constant rate in every power state,
// on every core, so that differences between readings measure time.
package tsc

// Invariant reports whether this processor's time stamp counter is
// invariant (CPUID leaf 0x80000007, EDX bit 8 on x86-64). Where it is not,
// or on other architectures, Read must not be used as a clock.
func Invariant() bool { return invariant }

// Read returns the counter with a plain RDTSC: unlike the ordered read
// behind the monotonic clock, it does not wait for earlier loads to finish,
// so a reading may be taken a few cycles early. On architectures without
// the counter it returns 0.
func Read() uint64 { return read() }
