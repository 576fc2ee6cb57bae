#include "textflag.h"

// func cas128CASP(e *entry, old0, old1, new0, new1 uint64) (swapped bool)
//
// CASPAL X0, X1, X2, X3, [X4] compares X1:X0 with the 16 bytes at X4 and,
// when they are equal, stores X3:X2 there; either way X1:X0 receive what
// the memory held. The low doubleword is the entry's first field. Go's
// assembler knows only the unordered CASP (CASPD), so the instruction is
// written as its word: CASPD (R0, R1), (R4), (R2, R3) is 0x48207c82, and
// the acquire (L, bit 22) and release (o0, bit 15) bits make it CASPAL.
TEXT ·cas128CASP(SB), NOSPLIT, $0-41
	MOVD e+0(FP), R4
	MOVD old0+8(FP), R0
	MOVD old1+16(FP), R1
	MOVD new0+24(FP), R2
	MOVD new1+32(FP), R3
	MOVD R0, R5
	MOVD R1, R6
	WORD $0x4860fc82 // CASPAL (R0, R1), (R4), (R2, R3)
	CMP R0, R5
	CCMP EQ, R1, R6, $0
	CSET EQ, R7
	MOVB R7, swapped+40(FP)
	RET

// func cas128LLSC(e *entry, old0, old1, new0, new1 uint64) (swapped bool)
//
// The ARMv8.0 form: load-acquire exclusive the pair, compare, and
// store-release exclusive the new pair, again if the reservation was lost.
// A failed comparison clears the reservation and stores nothing. (Its read
// may tear, but a torn pair that differs from old had a differing half at
// the instant it was read, and a torn pair that matches fails STLXP.)
TEXT ·cas128LLSC(SB), NOSPLIT, $0-41
	MOVD e+0(FP), R4
	MOVD old0+8(FP), R0
	MOVD old1+16(FP), R1
	MOVD new0+24(FP), R2
	MOVD new1+32(FP), R3
again:
	LDAXP (R4), (R5, R6)
	CMP R0, R5
	BNE differ
	CMP R1, R6
	BNE differ
	STLXP (R2, R3), (R4), R7
	CBNZ R7, again
	MOVD $1, R7
	MOVB R7, swapped+40(FP)
	RET
differ:
	CLREX
	MOVB ZR, swapped+40(FP)
	RET
