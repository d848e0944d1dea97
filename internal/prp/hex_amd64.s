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

// Byte constants, broadcast with VPBROADCASTB (the weights with
// VPBROADCASTW).
DATA hexconst<>+0(SB)/1, $0x0f // nibble mask
DATA hexconst<>+1(SB)/1, $0x1f // decoder: the table index is c+0x1f
DATA hexconst<>+2(SB)/1, $0x57 // 'a'-10
DATA hexconst<>+3(SB)/1, $0x10 // VPMADDUBSW weights: 16×high + 1×low
DATA hexconst<>+4(SB)/1, $0x01
DATA hexconst<>+5(SB)/1, $0xf0 // a value of 16 or more has one of these bits
GLOBL hexconst<>(SB), RODATA|NOPTR, $6

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

// The decoder computes each character's value with one table lookup and
// rejects the character when that value is 16 or more:
//
//	v = (c - 0x57) - hexdecAdjust[(c + 0x1f) & 15]   (bytes, wrapping)
//
// except that VPSHUFB yields 0 instead of the entry when the index c + 0x1f
// has bit 7 set, which is for c in 0x61..0xe0. Then:
//   - in 0x61..0xe0, v = c - ('a' - 10): 'a'..'f' give 10..15 and every
//     other c there gives 16 or more;
//   - elsewhere the entry depends on lo = c&15 alone (the index's low four
//     bits are lo-1). For lo 0..9 it is -0x27, so v = c - '0': the digits
//     give 0..9, and no other c with such a lo outside 0x61..0xe0 gives
//     less than 16. For lo 10..15 it is 0x29, so v = c - 0x80, which is
//     below 16 only for c in 0x80..0x8f, inside 0x61..0xe0.
//
// So v ≤ 15 exactly for the 16 lowercase hex digits (uppercase is
// rejected), and then it is the digit's value. The loop keeps the largest v
// seen; the text was valid when it is below 16. Entry i of the table serves
// lo = i+1 (mod 16): entries 0-8 and 15 are -0x27, entries 9-14 are 0x29.
DATA hexdecAdjust<>+0(SB)/8, $0xd9d9d9d9d9d9d9d9
DATA hexdecAdjust<>+8(SB)/8, $0xd9292929292929d9
DATA hexdecAdjust<>+16(SB)/8, $0xd9d9d9d9d9d9d9d9
DATA hexdecAdjust<>+24(SB)/8, $0xd9292929292929d9
GLOBL hexdecAdjust<>(SB), RODATA|NOPTR, $32

// HEXVALUES turns the 32 characters in c into their values v (above) and
// keeps in acc the bytewise maximum of acc and v. Uses the constants in
// Y6-Y8; clobbers t.
#define HEXVALUES(c, v, t, acc) \
	VPADDB  Y6, c, t \
	VPSUBB  Y8, c, v \
	VPSHUFB t, Y7, t \
	VPSUBB  t, v, v  \
	VPMAXUB v, acc, acc

// HEXLOAD loads the 64 characters at off(SI) as the pair of registers
// HEXPACK needs. VPACKUSWB packs each 128-bit lane on its own, so for the
// 32 result bytes to come out in order, lo holds characters 0-15 and 32-47
// and hi holds 16-31 and 48-63. A load of 16-47 shared by both and two
// blends with the loads of 0-31 and 32-63 put them there, which costs less
// than reordering the packed result across lanes (VPERMQ).
#define HEXLOAD(off, lo, hi) \
	VMOVDQU  off+16(SI), hi             \
	VPBLENDD $0x0f, off(SI), hi, lo     \
	VPBLENDD $0xf0, off+32(SI), hi, hi

// HEXPACK turns the values of the 64 characters in lo and hi (as HEXLOAD
// arranges them) into the 32 bytes they spell, in lo: each pair (high,
// low) becomes the word 16×high+low ≤ 255, and the words are packed to
// bytes. Uses the weights in Y13.
#define HEXPACK(lo, hi) \
	VPMADDUBSW Y13, lo, lo \
	VPMADDUBSW Y13, hi, hi \
	VPACKUSWB  hi, lo, lo

// func decodeHexSIMD(dst, src *byte, n int) bool
//
// The main loop takes 128 characters; 64 more remain when n is an odd
// multiple of 32. Two maxima keep the dependency chains short.
TEXT ·decodeHexSIMD(SB), NOSPLIT, $0-25
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTB hexconst<>+1(SB), Y6
	VMOVDQU      hexdecAdjust<>(SB), Y7
	VPBROADCASTB hexconst<>+2(SB), Y8
	VPBROADCASTW hexconst<>+3(SB), Y13
	VPXOR        Y15, Y15, Y15 // largest values seen: none yet
	VPXOR        Y14, Y14, Y14
	CMPQ         CX, $64
	JB           dectail

decloop:
	HEXLOAD(0, Y0, Y1)
	HEXLOAD(64, Y9, Y10)
	HEXVALUES(Y0, Y2, Y3, Y15)
	HEXVALUES(Y1, Y4, Y5, Y14)
	HEXVALUES(Y9, Y11, Y3, Y15)
	HEXVALUES(Y10, Y12, Y5, Y14)
	HEXPACK(Y2, Y4)
	HEXPACK(Y11, Y12)
	VMOVDQU Y2, (DI)
	VMOVDQU Y11, 32(DI)
	ADDQ    $128, SI
	ADDQ    $64, DI
	SUBQ    $64, CX
	CMPQ    CX, $64
	JAE     decloop

dectail:
	TESTQ CX, CX
	JZ    decdone
	HEXLOAD(0, Y0, Y1)
	HEXVALUES(Y0, Y2, Y3, Y15)
	HEXVALUES(Y1, Y4, Y5, Y14)
	HEXPACK(Y2, Y4)
	VMOVDQU Y2, (DI)

decdone:
	VPMAXUB      Y14, Y15, Y15
	VPBROADCASTB hexconst<>+5(SB), Y14
	VPTEST       Y14, Y15 // every value below 16: no bit of 0xf0 set
	SETEQ        ret+24(FP)
	VZEROUPPER
	RET
