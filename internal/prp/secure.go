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
	// MaxSecureChannelFrames bounds the secure frames of one connection in
	// each direction: counters 0..MaxSecureChannelFrames-1 are usable, and
	// fresh keys come only from a new authenticated connection
	// (durability.md §2.1; R-transport MAX_SECURE_CHANNEL_FRAMES, CP
	// maxSecureChannelFrames).
	MaxSecureChannelFrames = 1 << 20
)

// ErrRekeyRequired reports that a direction of the session reached its
// frame bound: the frame was neither sealed nor opened, and the connection
// must end so that a new one brings fresh keys (durability.md §2). It ends
// the connection only: the runner reconnects with its lease at once.
var ErrRekeyRequired = errors.New("secure channel rekey required")

// ErrSecureFrame matches (errors.Is) every secure-frame rejection below.
// Each one is fatal for the connection (spec §2.2 "fail closed").
var ErrSecureFrame = errors.New("secure frame rejected")

// Secure-frame rejections. None of them carries frame bytes.
var (
	ErrPlaintextFrame   error = secureFrameError("unauthenticated plaintext frame after authentication")
	ErrFrameCounter     error = secureFrameError("secure frame counter replayed or out of order")
	ErrFrameMalformed   error = secureFrameError("secure frame is malformed")
	ErrFrameAuth        error = secureFrameError("secure frame authentication failed")
	errCounterExhausted error = secureFrameError("secure frame counter exhausted")
)

type secureFrameError string

func (e secureFrameError) Error() string        { return string(e) }
func (e secureFrameError) Is(target error) bool { return target == ErrSecureFrame }

// Role is a peer's fixed cryptographic role, independent of who dialled.
type Role uint8

// The two roles.
const (
	roleRunner Role = iota + 1 // client: seals client_to_core, opens core_to_client
	roleCore                   // controller: seals core_to_client, opens client_to_core
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
	aadHead []byte   // schema NUL sessionId NUL direction NUL, room for a counter
	nonceIn [12]byte // the nonce of the frame being sealed or opened
	counter uint64
	// limit is the direction's frame bound: no frame with counter >= limit
	// is sealed or opened (MaxSecureChannelFrames unless lowered).
	limit uint64
	err   error // sticky: a failed Open poisons the direction
}

// NewCoreSession derives the core's half of the channel from the handshake
// transcript: the challenge's signing bytes, the server proof and the
// client proof that VerifyClientProof accepted.
func NewCoreSession(authKey []byte, signing []byte, serverProofHex, clientProofHex string) (*Session, error) {
	return newSession(roleCore, authKey, signing, serverProofHex, clientProofHex)
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
	if role == roleRunner {
		s.seal, s.open = up, down
	} else {
		s.seal, s.open = down, up
	}
	s.SetFrameLimits(0, 0)
	return s, nil
}

// FrameCounts returns how many frames the session sealed and opened. Call
// it only while neither direction is in use (after the connection's link
// has ended): the link's writer and reader own the counters.
func (s *Session) FrameCounts() (sealed, opened uint64) { return s.seal.counter, s.open.counter }

// SetFrameLimits lowers the session's frame bounds, for sealing (send) and
// for opening (receive); 0 or a value above MaxSecureChannelFrames means
// MaxSecureChannelFrames. A core may lower its bound (CP
// secureChannelFrameLimit, 4..MaxSecureChannelFrames); runnerd lowers its
// own only in tests. Call it before the session seals or opens a frame.
func (s *Session) SetFrameLimits(send, receive uint64) {
	bound := func(n uint64) uint64 {
		if n == 0 || n > MaxSecureChannelFrames {
			return MaxSecureChannelFrames
		}
		return n
	}
	s.seal.limit, s.open.limit = bound(send), bound(receive)
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
	head := SecureFrameSchema + "\x00" + sessionID + "\x00" + dir + "\x00"
	aadHead := append(make([]byte, 0, len(head)+20), head...)
	return halfChannel{aead: aead, prefix: prefix, aadHead: aadHead}, nil
}

func (h *halfChannel) nonce(counter uint64) [12]byte {
	var n [12]byte
	copy(n[:4], h.prefix)
	binary.BigEndian.PutUint64(n[4:], counter)
	return n
}

// aad returns the frame's additional data. It writes the counter into the
// spare capacity of aadHead, so the result is only good until the next aad
// call on this direction; one goroutine per direction (Session) keeps that
// safe and spares an allocation per frame.
func (h *halfChannel) aad(counter uint64) []byte {
	return strconv.AppendUint(h.aadHead, counter, 10)
}

const (
	framePrefix = `{"schema":"` + SecureFrameSchema + `","counter":`
	frameMiddle = `,"ciphertext":"`
	frameSuffix = `"}`
)

// Seal encrypts plaintext under the next outbound counter and returns the
// secure-frame JSON to send as one text message:
// {"schema":"paperclip.runner.secure-frame.v1","counter":N,"ciphertext":"<hex>"}.
// The frame, about 2×len(plaintext)+110 bytes, is a fresh slice allocated
// once at its exact length; the caller owns it.
func (s *Session) Seal(plaintext []byte) ([]byte, error) {
	frame, err := s.AppendSeal(make([]byte, 0, sealedFrameLen(s.seal.counter, len(plaintext))), plaintext)
	if err != nil {
		return nil, err
	}
	return frame, nil
}

// AppendSeal is Seal writing the frame into dst's spare capacity, growing it
// if short, and returning dst extended by the frame, so that a sender can
// reuse one buffer for every frame. On error it returns dst unchanged and
// the counter does not advance. plaintext must not overlap dst's spare
// capacity (as with cipher.AEAD.Seal).
func (s *Session) AppendSeal(dst, plaintext []byte) ([]byte, error) {
	h := &s.seal
	if h.counter > maxFrameCounter {
		return dst, fmt.Errorf("seal frame: %w", errCounterExhausted)
	}
	if h.counter >= h.limit {
		return dst, fmt.Errorf("seal frame: %w", ErrRekeyRequired)
	}
	counter := h.counter
	var digits [20]byte
	ctr := strconv.AppendUint(digits[:0], counter, 10)
	ctLen := len(plaintext) + gcmTagSize
	head := len(framePrefix) + len(ctr) + len(frameMiddle)
	n := head + 2*ctLen + len(frameSuffix)
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	out := dst[start:]
	copy(out, framePrefix)
	copy(out[len(framePrefix):], ctr)
	copy(out[len(framePrefix)+len(ctr):], frameMiddle)
	copy(out[head+2*ctLen:], frameSuffix)

	// Seal into the back half of the hex field and expand it forward in
	// place (encodeLowerHex allows exactly this overlap): the frame is the
	// only buffer, written once by AES-GCM and once by the encoder.
	field := out[head : head+2*ctLen]
	h.nonceIn = h.nonce(counter) // a field: a local would escape to the heap
	ct := h.aead.Seal(field[ctLen:ctLen], h.nonceIn[:], plaintext, h.aad(counter))
	if &ct[0] != &field[ctLen] { // cipher.AEAD appends, so this never copies
		copy(field[ctLen:], ct)
	}
	encodeLowerHex(field, field[ctLen:])
	h.counter++
	return dst, nil
}

// sealedFrameLen is the length of the frame sealing n plaintext bytes under
// counter.
func sealedFrameLen(counter uint64, n int) int {
	var digits [20]byte
	return len(framePrefix) + len(strconv.AppendUint(digits[:0], counter, 10)) +
		len(frameMiddle) + 2*(n+gcmTagSize) + len(frameSuffix)
}

// Open parses a secure frame, requires the next inbound counter, checks the
// tag, and returns the plaintext in a fresh slice the caller owns (Open
// never reuses it, and never writes to frame). Any error is fatal for the
// connection, and the direction stays failed: every later Open returns the
// same error.
func (s *Session) Open(frame []byte) ([]byte, error) {
	pt, err := s.AppendOpen(nil, frame)
	if err != nil {
		return nil, err
	}
	return pt[:len(pt):len(pt)], nil
}

// AppendOpen is Open writing the plaintext into dst's spare capacity,
// growing it if short, and returning dst extended by the plaintext, so that
// a reader can reuse one buffer for every frame: AppendOpen(buf[:0], frame)
// allocates nothing once buf has grown to the largest frame. The plaintext
// then aliases buf and is overwritten by the next AppendOpen into it; a
// caller that keeps it copies it. On error it returns dst unchanged (its
// spare capacity may hold garbage) and the direction is failed, as with
// Open. frame must not overlap dst's spare capacity.
func (s *Session) AppendOpen(dst, frame []byte) ([]byte, error) {
	h := &s.open
	if h.err != nil {
		return dst, h.err
	}
	if h.counter >= h.limit {
		// The frame is refused unread: whatever it carries (a command, an
		// ack) comes back on the next connection (durability.md §2.3).
		h.err = fmt.Errorf("open frame: %w", ErrRekeyRequired)
		return dst, h.err
	}
	out, err := h.openFrame(dst, frame)
	if err != nil {
		h.err = fmt.Errorf("open frame: %w", err)
		return dst, h.err
	}
	return out, nil
}

// openFrame extracts counter and ciphertext from a frame. The exact layout
// Seal (and the reference core) produce takes a fast path that decodes the
// hex straight from the frame, with no JSON decode of the long string; any
// other JSON object goes through the general parser, which has the final
// word and the same rules: schema must be the secure-frame schema (else
// ErrPlaintextFrame), counter a non-negative integer literal ≤ 2^53−1,
// ciphertext non-empty lowercase hex of even length. Unknown members are
// ignored, as the reference does.
//
// The ciphertext is decoded into dst's spare capacity, which becomes the
// plaintext: AES-GCM opens it in place. It returns dst extended by the
// plaintext.
func (h *halfChannel) openFrame(dst, frame []byte) ([]byte, error) {
	counter, ctHex, fast := splitSecureFrameFast(frame)
	var ct []byte
	if fast {
		dst = slices.Grow(dst, len(ctHex)/2)
		ct = dst[len(dst) : len(dst)+len(ctHex)/2]
		fast = decodeLowerHex(ct, ctHex)
	}
	if !fast {
		var err error
		counter, ctHex, err = parseSecureFrameSlow(frame)
		if err != nil {
			return nil, err
		}
		dst = slices.Grow(dst, len(ctHex)/2)
		ct = dst[len(dst) : len(dst)+len(ctHex)/2]
		if !decodeLowerHex(ct, ctHex) {
			return nil, ErrFrameMalformed
		}
	}
	if counter != h.counter {
		return nil, ErrFrameCounter
	}
	if len(ct) < gcmTagSize {
		return nil, ErrFrameMalformed
	}
	h.nonceIn = h.nonce(counter)
	pt, err := h.aead.Open(ct[:0], h.nonceIn[:], ct, h.aad(counter))
	if err != nil {
		return nil, ErrFrameAuth
	}
	h.counter++
	return dst[:len(dst)+len(pt)], nil
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

// validCiphertextHex reports whether b is non-empty lowercase hex of even
// length.
func validCiphertextHex(b []byte) bool {
	if len(b) == 0 || len(b)%2 != 0 {
		return false
	}
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
