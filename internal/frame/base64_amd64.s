//go:build !purego

#include "textflag.h"

// Standard base64 on 24-byte / 32-character blocks with AVX2. The Go side
// (base64.go) checks CPU support and room, and handles the tails and
// anything the vector code refuses.

// Encoder: each 128-bit lane takes 12 input bytes (lane 1 is loaded from
// 12 bytes on), and VPSHUFB spreads every 3 bytes a, b, c of a group into
// one 32-bit word as the bytes b, a, c, b, so that two 16-bit multiplies
// can move each of the four 6-bit fields to the bottom of its own byte.
DATA b64encspread<>+0(SB)/8, $0x0405030401020001
DATA b64encspread<>+8(SB)/8, $0x0a0b090a07080607
DATA b64encspread<>+16(SB)/8, $0x0405030401020001
DATA b64encspread<>+24(SB)/8, $0x0a0b090a07080607
GLOBL b64encspread<>(SB), RODATA|NOPTR, $32

// Offset from a 6-bit value to its character, indexed by the class the
// encoder computes (see ENCCLASS): 0 for 26..51 ('a'-26), 1..10 for
// 52..61 ('0'-52), 11 for 62 ('+'-62), 12 for 63 ('/'-63), 13 for 0..25
// ('A'). Once per lane.
DATA b64encoffset<>+0(SB)/8, $0xfcfcfcfcfcfcfc47
DATA b64encoffset<>+8(SB)/8, $0x000041f0edfcfcfc
DATA b64encoffset<>+16(SB)/8, $0xfcfcfcfcfcfcfc47
DATA b64encoffset<>+24(SB)/8, $0x000041f0edfcfcfc
GLOBL b64encoffset<>(SB), RODATA|NOPTR, $32

// 32-bit constants, broadcast with VPBROADCASTD.
DATA b64const<>+0(SB)/4, $0x0fc0fc00  // encoder: the fields of a and of c's top
DATA b64const<>+4(SB)/4, $0x04000040  // encoder: their high-half multipliers (>>10, >>6)
DATA b64const<>+8(SB)/4, $0x003f03f0  // encoder: the other two fields
DATA b64const<>+12(SB)/4, $0x01000010 // encoder: their low-half multipliers (<<4, <<8)
DATA b64const<>+16(SB)/4, $0x33333333 // encoder: 51 per byte
DATA b64const<>+20(SB)/4, $0x1a1a1a1a // encoder: 26 per byte
DATA b64const<>+24(SB)/4, $0x0d0d0d0d // encoder: 13 per byte
DATA b64const<>+28(SB)/4, $0x0f0f0f0f // decoder: nibble mask
DATA b64const<>+32(SB)/4, $0x2f2f2f2f // decoder: '/'
DATA b64const<>+36(SB)/4, $0x01400140 // decoder: VPMADDUBSW weights, 64×first + second
DATA b64const<>+40(SB)/4, $0x00011000 // decoder: VPMADDWD weights, 4096×first + second
GLOBL b64const<>(SB), RODATA|NOPTR, $44

// Decoder validity: a character is in the standard alphabet exactly when
// b64declo[low nibble] AND b64dechi[high nibble] is zero. b64dechi gives
// each high nibble one bit (0x01 for 2, 0x02 for 3, 0x04 for 4 and 6,
// 0x08 for 5 and 7, 0x10 for any nibble without a valid character), and
// b64declo sets for each low nibble the bits of the high nibbles that do
// not make a valid character with it ('+' 0x2b and '/' 0x2f, '0'-'9',
// 'A'-'O' and 'a'-'o' from low nibble 1, 'P'-'Z' and 'p'-'z' up to 0xa).
DATA b64declo<>+0(SB)/8, $0x1111111111111115
DATA b64declo<>+8(SB)/8, $0x1a1b1b1b1a131111
DATA b64declo<>+16(SB)/8, $0x1111111111111115
DATA b64declo<>+24(SB)/8, $0x1a1b1b1b1a131111
GLOBL b64declo<>(SB), RODATA|NOPTR, $32

DATA b64dechi<>+0(SB)/8, $0x0804080402011010
DATA b64dechi<>+8(SB)/8, $0x1010101010101010
DATA b64dechi<>+16(SB)/8, $0x0804080402011010
DATA b64dechi<>+24(SB)/8, $0x1010101010101010
GLOBL b64dechi<>(SB), RODATA|NOPTR, $32

// Decoder: offset from a valid character to its 6-bit value, indexed by
// the high nibble, minus one for '/' (which shares high nibble 2 with
// '+'): 1 '/' (+16), 2 '+' (+19), 3 digits (+4), 4-5 upper case (-65),
// 6-7 lower case (-71).
DATA b64decoffset<>+0(SB)/8, $0xb9b9bfbf04131000
DATA b64decoffset<>+8(SB)/8, $0x0000000000000000
DATA b64decoffset<>+16(SB)/8, $0xb9b9bfbf04131000
DATA b64decoffset<>+24(SB)/8, $0x0000000000000000
GLOBL b64decoffset<>(SB), RODATA|NOPTR, $32

// Decoder: the three bytes of each 32-bit word (value in its low 24 bits,
// first byte most significant) in order, 12 per lane, then zeros.
DATA b64decpack<>+0(SB)/8, $0x090a040506000102
DATA b64decpack<>+8(SB)/8, $0xffffffff0c0d0e08
DATA b64decpack<>+16(SB)/8, $0x090a040506000102
DATA b64decpack<>+24(SB)/8, $0xffffffff0c0d0e08
GLOBL b64decpack<>(SB), RODATA|NOPTR, $32

// Decoder: VPERMD indices joining the 12 bytes of each lane.
DATA b64declanes<>+0(SB)/4, $0
DATA b64declanes<>+4(SB)/4, $1
DATA b64declanes<>+8(SB)/4, $2
DATA b64declanes<>+12(SB)/4, $4
DATA b64declanes<>+16(SB)/4, $5
DATA b64declanes<>+20(SB)/4, $6
DATA b64declanes<>+24(SB)/4, $7
DATA b64declanes<>+28(SB)/4, $7
GLOBL b64declanes<>(SB), RODATA|NOPTR, $32

// func encodeBase64SIMD(dst, src *byte, blocks int)
TEXT ·encodeBase64SIMD(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX
	VMOVDQU b64encspread<>(SB), Y15
	VMOVDQU b64encoffset<>(SB), Y14
	VPBROADCASTD b64const<>+0(SB), Y13
	VPBROADCASTD b64const<>+4(SB), Y12
	VPBROADCASTD b64const<>+8(SB), Y11
	VPBROADCASTD b64const<>+12(SB), Y10
	VPBROADCASTD b64const<>+16(SB), Y9
	VPBROADCASTD b64const<>+20(SB), Y8
	VPBROADCASTD b64const<>+24(SB), Y7

encloop:
	// Bytes 0-15 in lane 0, 12-27 in lane 1; each lane uses its first 12.
	VMOVDQU     (SI), X0
	VINSERTI128 $1, 12(SI), Y0, Y0
	VPSHUFB     Y15, Y0, Y0

	// The four 6-bit fields, each at the bottom of its byte.
	VPAND    Y13, Y0, Y1
	VPMULHUW Y12, Y1, Y1
	VPAND    Y11, Y0, Y2
	VPMULLW  Y10, Y2, Y2
	VPOR     Y2, Y1, Y0

	// ENCCLASS: value-51 saturated (1..12 for 52..63, else 0), or 13
	// where the value is below 26; then add the class's offset.
	VPSUBUSB Y9, Y0, Y1
	VPCMPGTB Y0, Y8, Y2
	VPAND    Y7, Y2, Y2
	VPOR     Y2, Y1, Y1
	VPSHUFB  Y1, Y14, Y1
	VPADDB   Y1, Y0, Y0

	VMOVDQU Y0, (DI)
	ADDQ    $24, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     encloop
	VZEROUPPER
	RET

// func decodeBase64SIMD(dst, src *byte, blocks int) int
TEXT ·decodeBase64SIMD(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX
	XORQ AX, AX
	VMOVDQU b64declo<>(SB), Y15
	VMOVDQU b64dechi<>(SB), Y14
	VMOVDQU b64decoffset<>(SB), Y13
	VMOVDQU b64decpack<>(SB), Y12
	VMOVDQU b64declanes<>(SB), Y11
	VPBROADCASTD b64const<>+28(SB), Y10
	VPBROADCASTD b64const<>+32(SB), Y9
	VPBROADCASTD b64const<>+36(SB), Y8
	VPBROADCASTD b64const<>+40(SB), Y7

decloop:
	VMOVDQU (SI), Y0
	VPSRLD  $4, Y0, Y1
	VPAND   Y10, Y1, Y1 // high nibbles
	VPAND   Y10, Y0, Y2 // low nibbles
	VPSHUFB Y2, Y15, Y3
	VPSHUFB Y1, Y14, Y4
	VPTEST  Y3, Y4
	JNZ     decdone     // a character outside the alphabet: stop before this block

	// 6-bit values: the high nibble's offset, one slot lower for '/'.
	VPCMPEQB Y9, Y0, Y2
	VPADDB   Y2, Y1, Y1
	VPSHUFB  Y1, Y13, Y1
	VPADDB   Y1, Y0, Y0

	// Four values to 24 bits per word, then the bytes in order.
	VPMADDUBSW Y8, Y0, Y0
	VPMADDWD   Y7, Y0, Y0
	VPSHUFB    Y12, Y0, Y0
	VPERMD     Y0, Y11, Y0

	VMOVDQU Y0, (DI) // 24 bytes of data, 8 of garbage the next block overwrites
	ADDQ    $32, SI
	ADDQ    $24, DI
	INCQ    AX
	CMPQ    AX, CX
	JNE     decloop

decdone:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
