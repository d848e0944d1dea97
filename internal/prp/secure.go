package prp

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// SecureFrameSchema is the "schema" of every frame after authentication.
const SecureFrameSchema = "paperclip.runner.secure-frame.v1"

// Direction labels and nonce prefixes (spec §2.2).
const (
	dirClientToCore    = "client_to_core"
	dirCoreToClient    = "core_to_client"
	prefixClientToCore = "P3C1"
	prefixCoreToClient = "P3S1"
)

const (
	// maxFrameCounter is the largest counter a frame may carry: the core
	// parses counters as JavaScript numbers and requires Number.isSafeInteger.
	maxFrameCounter = 1<<53 - 1
	// gcmTagSize is the AES-GCM tag length appended to every ciphertext.
	gcmTagSize = 16
)

// ErrSecureFrame matches (errors.Is) every secure-frame rejection below.
// Each one is fatal for the connection (spec §2.2 "fail closed").
var ErrSecureFrame = errors.New("secure frame rejected")

// Secure-frame rejections. None of them carries frame bytes.
var (
	ErrPlaintextFrame   error = secureFrameError("unauthenticated plaintext frame after authentication")
	ErrFrameCounter     error = secureFrameError("secure frame counter replayed or out of order")
	ErrFrameMalformed   error = secureFrameError("secure frame is malformed")
	ErrFrameAuth        error = secureFrameError("secure frame authentication failed")
	ErrCounterExhausted error = secureFrameError("secure frame counter exhausted")
)

type secureFrameError string

func (e secureFrameError) Error() string        { return string(e) }
func (e secureFrameError) Is(target error) bool { return target == ErrSecureFrame }

// Role is a peer's fixed cryptographic role, independent of who dialled.
type Role uint8

// The two roles.
const (
	RoleRunner Role = iota + 1 // client: seals client_to_core, opens core_to_client
	RoleCore                   // controller: seals core_to_client, opens client_to_core
)

// Session is one authenticated secure channel (spec §2.2): the session id,
// the negotiated version, the bound identity and connection, and the two
// direction keys with their counters.
//
// Seal and Open are not safe for concurrent use per direction: exactly one
// writer goroutine seals (so the counter order equals the send order) and
// exactly one reader goroutine opens. A Seal and an Open may run concurrently.
// The exported fields are set by the handshake and read-only afterwards.
type Session struct {
	// ID is the session id, "sha256:" + hex(binding).
	ID string
	// Role is this side's role.
	Role Role
	// Version is the negotiated PRP version, fixed for the connection (the
	// "version" of every later envelope).
	Version int
	// Identity is the six identity fields the connection is bound to.
	Identity Identity
	// ConnectionID and ConnectionLeaseID come from the welcome.
	ConnectionID      string
	ConnectionLeaseID string

	seal, open halfChannel
}

// halfChannel is one direction of a session.
type halfChannel struct {
	aead    cipher.AEAD
	prefix  string
	aadHead []byte // schema NUL sessionId NUL direction NUL
	counter uint64
	scratch []byte
	err     error // sticky: a failed Open poisons the direction
}

// newSession derives the channel from the handshake transcript.
func newSession(role Role, authKey []byte, signing []byte, serverProofHex, clientProofHex string) (*Session, error) {
	binding := sessionBinding(signing, serverProofHex, clientProofHex)
	c2c, c2r := directionKeys(authKey, binding)
	s := &Session{ID: "sha256:" + hex.EncodeToString(binding[:]), Role: role}
	up, err := newHalf(c2c[:], prefixClientToCore, s.ID, dirClientToCore)
	if err != nil {
		return nil, err
	}
	down, err := newHalf(c2r[:], prefixCoreToClient, s.ID, dirCoreToClient)
	if err != nil {
		return nil, err
	}
	if role == RoleRunner {
		s.seal, s.open = up, down
	} else {
		s.seal, s.open = down, up
	}
	return s, nil
}

func newHalf(key []byte, prefix, sessionID, dir string) (halfChannel, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return halfChannel{}, fmt.Errorf("create cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return halfChannel{}, fmt.Errorf("create gcm: %w", err)
	}
	head := []byte(SecureFrameSchema + "\x00" + sessionID + "\x00" + dir + "\x00")
	return halfChannel{aead: aead, prefix: prefix, aadHead: head}, nil
}

func (h *halfChannel) nonce(counter uint64) [12]byte {
	var n [12]byte
	copy(n[:4], h.prefix)
	binary.BigEndian.PutUint64(n[4:], counter)
	return n
}

func (h *halfChannel) aad(counter uint64) []byte {
	return strconv.AppendUint(h.aadHead[:len(h.aadHead):len(h.aadHead)], counter, 10)
}

const (
	framePrefix = `{"schema":"` + SecureFrameSchema + `","counter":`
	frameMiddle = `,"ciphertext":"`
	frameSuffix = `"}`
)

// Seal encrypts plaintext under the next outbound counter and returns the
// secure-frame JSON to send as one text message:
// {"schema":"paperclip.runner.secure-frame.v1","counter":N,"ciphertext":"<hex>"}.
// The frame is about 2×len(plaintext)+110 bytes.
func (s *Session) Seal(plaintext []byte) ([]byte, error) {
	h := &s.seal
	if h.counter > maxFrameCounter {
		return nil, fmt.Errorf("seal frame: %w", ErrCounterExhausted)
	}
	counter := h.counter
	nonce := h.nonce(counter)
	h.scratch = h.aead.Seal(h.scratch[:0], nonce[:], plaintext, h.aad(counter))
	out := make([]byte, 0, len(framePrefix)+20+len(frameMiddle)+2*len(h.scratch)+len(frameSuffix))
	out = append(out, framePrefix...)
	out = strconv.AppendUint(out, counter, 10)
	out = append(out, frameMiddle...)
	out = appendLowerHex(out, h.scratch)
	out = append(out, frameSuffix...)
	h.counter++
	return out, nil
}

// Open parses a secure frame, requires the next inbound counter, checks the
// tag, and returns the plaintext. Any error is fatal for the connection, and
// the direction stays failed: every later Open returns the same error.
func (s *Session) Open(frame []byte) ([]byte, error) {
	h := &s.open
	if h.err != nil {
		return nil, h.err
	}
	pt, err := h.openFrame(frame)
	if err != nil {
		h.err = fmt.Errorf("open frame: %w", err)
		return nil, h.err
	}
	return pt, nil
}

func (h *halfChannel) openFrame(frame []byte) ([]byte, error) {
	// The fast path decodes the hex straight from the frame; anything it
	// cannot take goes through the general parser, which has the final word.
	counter, ctHex, fast := splitSecureFrameFast(frame)
	var ct []byte
	if fast {
		ct, fast = h.decodeCiphertext(ctHex)
	}
	if !fast {
		var err error
		counter, ctHex, err = parseSecureFrameSlow(frame)
		if err != nil {
			return nil, err
		}
		var ok bool
		if ct, ok = h.decodeCiphertext(ctHex); !ok {
			return nil, ErrFrameMalformed
		}
	}
	if counter != h.counter {
		return nil, ErrFrameCounter
	}
	if len(ct) < gcmTagSize {
		return nil, ErrFrameMalformed
	}
	nonce := h.nonce(counter)
	pt, err := h.aead.Open(nil, nonce[:], ct, h.aad(counter))
	if err != nil {
		return nil, ErrFrameAuth
	}
	h.counter++
	return pt, nil
}

// decodeCiphertext decodes lowercase hex into the scratch buffer.
func (h *halfChannel) decodeCiphertext(src []byte) ([]byte, bool) {
	n := len(src) / 2
	if cap(h.scratch) < n {
		h.scratch = make([]byte, n)
	}
	ct := h.scratch[:n]
	return ct, decodeLowerHex(ct, src)
}

// parseSecureFrame extracts counter and ciphertext hex from a frame. The
// exact layout Seal (and the reference core) produce takes a fast path; any
// other JSON object goes through the general parser with the same rules:
// schema must be the secure-frame schema (else ErrPlaintextFrame), counter
// a non-negative integer literal ≤ 2^53−1, ciphertext non-empty lowercase
// hex of even length. Unknown members are ignored, as the reference does.
func parseSecureFrame(frame []byte) (uint64, []byte, error) {
	if c, ct, ok := splitSecureFrameFast(frame); ok && validCiphertextHex(ct) {
		return c, ct, nil
	}
	return parseSecureFrameSlow(frame)
}

// splitSecureFrameFast matches the exact layout Seal writes and returns the
// counter and the still unchecked ciphertext text between the quotes.
func splitSecureFrameFast(frame []byte) (uint64, []byte, bool) {
	rest, ok := bytes.CutPrefix(frame, []byte(framePrefix))
	if !ok {
		return 0, nil, false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	counter, ok := parseCounter(rest[:i])
	if !ok {
		return 0, nil, false
	}
	rest, ok = bytes.CutPrefix(rest[i:], []byte(frameMiddle))
	if !ok {
		return 0, nil, false
	}
	ct, ok := bytes.CutSuffix(rest, []byte(frameSuffix))
	if !ok || len(ct) == 0 || len(ct)%2 != 0 {
		return 0, nil, false
	}
	return counter, ct, true
}

func parseSecureFrameSlow(frame []byte) (uint64, []byte, error) {
	v, err := parseJSON(frame)
	if err != nil || v.kind != jsonObject {
		return 0, nil, ErrFrameMalformed
	}
	if schema, ok := v.member("schema").goString(); !ok || schema != SecureFrameSchema {
		return 0, nil, ErrPlaintextFrame
	}
	cv := v.member("counter")
	if cv == nil || cv.kind != jsonNumber {
		return 0, nil, ErrFrameMalformed
	}
	counter, ok := parseCounter(cv.numText)
	if !ok {
		return 0, nil, ErrFrameMalformed
	}
	ctv := v.member("ciphertext")
	if ctv == nil || ctv.kind != jsonString {
		return 0, nil, ErrFrameMalformed
	}
	ct := make([]byte, len(ctv.str))
	for i, c := range ctv.str {
		if c >= 0x80 {
			return 0, nil, ErrFrameMalformed
		}
		ct[i] = byte(c)
	}
	if !validCiphertextHex(ct) {
		return 0, nil, ErrFrameMalformed
	}
	return counter, ct, nil
}

// parseCounter accepts a canonical non-negative integer literal ≤ 2^53−1.
func parseCounter(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 || (len(b) > 1 && b[0] == '0') {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n <= maxFrameCounter
}

func validCiphertextHex(b []byte) bool {
	if len(b) == 0 || len(b)%2 != 0 {
		return false
	}
	for _, c := range b {
		if hexValue[c] == 0xff {
			return false
		}
	}
	return true
}

// hexValue maps a lowercase hex digit to its value and anything else to 0xff.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := byte(0); i < 10; i++ {
		t['0'+i] = i
	}
	for i := byte(0); i < 6; i++ {
		t['a'+i] = 10 + i
	}
	return t
}()

// SWAR lane constants for the hex codec below.
const (
	lanes01 = 0x0101010101010101
	lanes0f = 0x0f0f0f0f0f0f0f0f
	lanes80 = 0x8080808080808080
)

// appendLowerHex appends the lowercase hex of src to dst, four input bytes
// per step: each byte is spread into a 16-bit lane as (hi, lo) nibbles, and
// nibble n becomes '0'+n, plus 39 more when n ≥ 10 ('a'-'0'-10).
func appendLowerHex(dst, src []byte) []byte {
	n := len(dst)
	dst = slices.Grow(dst, 2*len(src))[:n+2*len(src)]
	out := dst[n:]
	for len(src) >= 8 && len(out) >= 16 {
		binary.LittleEndian.PutUint64(out, hexLanes(binary.LittleEndian.Uint32(src)))
		binary.LittleEndian.PutUint64(out[8:], hexLanes(binary.LittleEndian.Uint32(src[4:])))
		src, out = src[8:], out[16:]
	}
	const digits = "0123456789abcdef"
	for i, b := range src {
		out[2*i], out[2*i+1] = digits[b>>4], digits[b&0xf]
	}
	return dst
}

// hexLanes turns four bytes into their eight lowercase hex digits.
func hexLanes(w uint32) uint64 {
	x := uint64(w)
	x = (x | x<<16) & 0x0000ffff0000ffff
	x = (x | x<<8) & 0x00ff00ff00ff00ff
	v := (x>>4)&0x000f000f000f000f | (x&0x000f000f000f000f)<<8
	return v + 0x3030303030303030 + ((v+0x0606060606060606)>>4&lanes01)*39
}

// decodeLowerHex decodes len(dst)*2 lowercase hex digits from src and
// reports whether every digit was valid ([0-9a-f]), eight digits per step.
func decodeLowerHex(dst, src []byte) bool {
	if len(src) != 2*len(dst) {
		return false
	}
	for len(src) >= 8 && len(dst) >= 4 {
		m, ok := unhexLanes(binary.LittleEndian.Uint64(src))
		if !ok {
			return false
		}
		binary.LittleEndian.PutUint32(dst, m)
		src, dst = src[8:], dst[4:]
	}
	var bad byte
	for i := range dst {
		hi, lo := hexValue[src[2*i]], hexValue[src[2*i+1]]
		bad |= hi | lo
		dst[i] = hi<<4 | lo
	}
	return bad&0xf0 == 0
}

// unhexLanes decodes eight lowercase hex digits into four bytes.
func unhexLanes(x uint64) (uint32, bool) {
	// Per lane (ASCII only): '0' ≤ c ≤ '9' or 'a' ≤ c ≤ 'f'. Adding k sets
	// a lane's top bit exactly when c ≥ 0x80−k, and no lane carries.
	digit := (x + 0x5050505050505050) &^ (x + 0x4646464646464646)
	letter := (x + 0x1f1f1f1f1f1f1f1f) &^ (x + 0x1919191919191919)
	if x&lanes80 != 0 || (digit|letter)&lanes80 != lanes80 {
		return 0, false
	}
	nib := x&lanes0f + (x>>6&lanes01)*9
	m := (nib<<4 | nib>>8) & 0x00ff00ff00ff00ff
	m = (m | m>>8) & 0x0000ffff0000ffff
	m = (m | m>>16) & 0xffffffff
	return uint32(m), true
}
