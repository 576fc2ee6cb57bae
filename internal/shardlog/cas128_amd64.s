#include "textflag.h"

// func cas128(e *entry, old0, old1, new0, new1 uint64) (swapped bool)
//
// LOCK CMPXCHG16B compares RDX:RAX with the 16 bytes at e and, when they
// are equal, stores RCX:RBX there; the low quadword is the entry's first
// field. e must be 16-byte aligned.
TEXT ·cas128(SB), NOSPLIT, $0-41
	MOVQ e+0(FP), DI
	MOVQ old0+8(FP), AX
	MOVQ old1+16(FP), DX
	MOVQ new0+24(FP), BX
	MOVQ new1+32(FP), CX
	LOCK
	CMPXCHG16B (DI)
	SETEQ swapped+40(FP)
	RET
