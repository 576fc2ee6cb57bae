package shardlog

import (
	"github.com/floodgate-go/floodgate/internal/testhook"
	"golang.org/x/sys/cpu"
)

// lockFreeLog is true on every arm64 processor: ARMv8.0 has the exclusive
// pair LDAXP/STLXP, and ARMv8.1's LSE adds CASP.
const lockFreeLog = true

// useCASP chooses LSE's CASPAL where the processor has it (cpu.ARM64.
// HasATOMICS), and the LDAXP/STLXP loop elsewhere. Tests set it false,
// through testhook.ExclusivePair, to run the loop on a processor that has
// both.
var useCASP = cpu.ARM64.HasATOMICS

func init() { testhook.ExclusivePair = func() { useCASP = false } }

// cas128 atomically replaces the 16 bytes at e, (old0, old1), with
// (new0, new1), and reports whether it did. e must be 16-byte aligned.
// Both forms order it as x86's LOCK CMPXCHG16B is ordered: acquire and
// release, so no load or store moves across it.
func cas128(e *entry, old0, old1, new0, new1 uint64) bool {
	if useCASP {
		return cas128CASP(e, old0, old1, new0, new1)
	}
	return cas128LLSC(e, old0, old1, new0, new1)
}

//go:noescape
func cas128CASP(e *entry, old0, old1, new0, new1 uint64) (swapped bool)

//go:noescape
func cas128LLSC(e *entry, old0, old1, new0, new1 uint64) (swapped bool)
