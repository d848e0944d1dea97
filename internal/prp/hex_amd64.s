//go:build !purego

#include "textflag.h"

// Lowercase hex codec on 32-byte blocks with AVX2. The Go side (hex.go)
// checks lengths and CPU support and handles the tails.

// The sixteen digits, once per 128-bit lane (VPSHUFB looks up per lane).
DATA hexdigits<>+0(SB)/8, $0x3736353433323130
DATA hexdigits<>+8(SB)/8, $0x6665646362613938
DATA hexdigits<>+16(SB)/8, $0x3736353433323130
DATA hexdigits<>+24(SB)/8, $0x6665646362613938
GLOBL hexdigits<>(SB), RODATA|NOPTR, $32

// Byte constants, broadcast with VPBROADCASTB.
DATA hexconst<>+0(SB)/1, $0x0f // nibble mask
DATA hexconst<>+1(SB)/1, $0x30 // '0'
DATA hexconst<>+2(SB)/1, $0x61 // 'a'
DATA hexconst<>+3(SB)/1, $0x09 // c-'0' ≤ 9: a digit
DATA hexconst<>+4(SB)/1, $0x05 // c-'a' ≤ 5: a letter
DATA hexconst<>+5(SB)/1, $0x0a // a letter's value is c-'a'+10
DATA hexconst<>+6(SB)/1, $0x10 // VPMADDUBSW weights: 16×high + 1×low
DATA hexconst<>+7(SB)/1, $0x01
GLOBL hexconst<>(SB), RODATA|NOPTR, $8

// func encodeHexSIMD(dst, src *byte, n int)
TEXT ·encodeHexSIMD(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVDQU hexdigits<>(SB), Y7
	VPBROADCASTB hexconst<>+0(SB), Y6

encloop:
	VMOVDQU (SI), Y0
	VPSRLW  $4, Y0, Y1
	VPAND   Y6, Y1, Y1       // high nibbles
	VPAND   Y6, Y0, Y0       // low nibbles
	VPSHUFB Y1, Y7, Y1       // high digits
	VPSHUFB Y0, Y7, Y0       // low digits

	// Interleave high, low per lane: Y2 holds bytes 0-7 | 16-23, Y3 holds
	// 8-15 | 24-31; the lane swaps put them back in order.
	VPUNPCKLBW Y0, Y1, Y2
	VPUNPCKHBW Y0, Y1, Y3
	VPERM2I128 $0x20, Y3, Y2, Y4
	VPERM2I128 $0x31, Y3, Y2, Y5

	// The whole block is in registers before either store, which is what
	// makes the in-place expansion safe.
	VMOVDQU Y4, (DI)
	VMOVDQU Y5, 32(DI)
	ADDQ    $32, SI
	ADDQ    $64, DI
	SUBQ    $32, CX
	JNZ     encloop
	VZEROUPPER
	RET

// HEXVALUES turns the 32 characters in c into their nibble values in c and
// ANDs into acc a mask that is all ones in each byte that was a lowercase
// hex digit. With d = c-'0' and l = c-'a' (wrapping), c is a digit when
// d ≤ 9 and a letter when l ≤ 5 (unsigned), and its value is d or l+10.
// Uses the constants in Y8-Y12; clobbers t1-t3.
#define HEXVALUES(c, t1, t2, t3, acc) \
	VPSUBB   Y8, c, t1    \
	VPSUBB   Y9, c, t2    \
	VPMINUB  Y10, t1, t3  \
	VPCMPEQB t1, t3, t3   \
	VPAND    t3, t1, t1   \
	VPMINUB  Y11, t2, c   \
	VPCMPEQB t2, c, c     \
	VPADDB   Y12, t2, t2  \
	VPAND    c, t2, t2    \
	VPOR     c, t3, t3    \
	VPAND    t3, acc, acc \
	VPOR     t1, t2, c

// func decodeHexSIMD(dst, src *byte, n int) bool
TEXT ·decodeHexSIMD(SB), NOSPLIT, $0-25
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTB hexconst<>+1(SB), Y8
	VPBROADCASTB hexconst<>+2(SB), Y9
	VPBROADCASTB hexconst<>+3(SB), Y10
	VPBROADCASTB hexconst<>+4(SB), Y11
	VPBROADCASTB hexconst<>+5(SB), Y12
	VPBROADCASTW hexconst<>+6(SB), Y13
	VPCMPEQB     Y15, Y15, Y15 // validity accumulator: all ones

decloop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y4
	HEXVALUES(Y0, Y1, Y2, Y3, Y15)
	HEXVALUES(Y4, Y5, Y6, Y7, Y15)

	// Each character pair (high, low) becomes the word 16×high+low ≤ 255;
	// packing to bytes works per lane, so the quadwords are then reordered.
	VPMADDUBSW Y13, Y0, Y0
	VPMADDUBSW Y13, Y4, Y4
	VPACKUSWB  Y4, Y0, Y0
	VPERMQ     $0xD8, Y0, Y0
	VMOVDQU    Y0, (DI)
	ADDQ       $64, SI
	ADDQ       $32, DI
	SUBQ       $32, CX
	JNZ        decloop

	VPMOVMSKB Y15, AX
	CMPL      AX, $0xffffffff
	SETEQ     ret+24(FP)
	VZEROUPPER
	RET
