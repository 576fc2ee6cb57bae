package shardlog

import "golang.org/x/sys/cpu"

// lockFreeLog reports whether this machine has the 16-byte compare-and-swap
// that the lock-free sliding log is built on (CMPXCHG16B, present on every
// x86-64 processor since about 2006).
var lockFreeLog = cpu.X86.HasCX16

// cas128 atomically replaces the 16 bytes at e, (old0, old1), with
// (new0, new1), and reports whether it did. e must be 16-byte aligned.
//
//go:noescape
func cas128(e *entry, old0, old1, new0, new1 uint64) (swapped bool)
