package prp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
)

// Domain-separation labels (spec §2.2; CP and R-transport use the same).
const (
	domainCredentialID   = "paperclip-runner-credential-id-v1"
	domainAuthKey        = "paperclip-runner-auth-key-v1"
	domainServerProof    = "paperclip-runner-server-proof-v1"
	domainClientProof    = "paperclip-runner-client-proof-v1"
	domainSessionBinding = "paperclip-runner-session-binding-v1"
	domainClientToCore   = "paperclip-runner-client-to-core-key-v1"
	domainCoreToClient   = "paperclip-runner-core-to-client-key-v1"
)

// domainHash is H(domain, parts…): SHA-256 over the UTF-8 domain, one 0x00
// byte, then per part an 8-byte big-endian length and the bytes.
func domainHash(domain string, parts ...[]byte) [32]byte {
	h := sha256.New()
	writeDomain(h, domain, parts)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// domainHMAC is the same framing under HMAC-SHA-256 with key.
func domainHMAC(key []byte, domain string, parts ...[]byte) [32]byte {
	h := hmac.New(sha256.New, key)
	writeDomain(h, domain, parts)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func writeDomain(h io.Writer, domain string, parts [][]byte) {
	h.Write([]byte(domain))
	h.Write([]byte{0})
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
}

// CredentialID returns the public id of a bearer token (ticket or lease
// token): "sha256:" + hex(H("paperclip-runner-credential-id-v1", token)).
// It is safe to log; the token is not.
func CredentialID(token string) string {
	id := domainHash(domainCredentialID, []byte(token))
	return "sha256:" + hex.EncodeToString(id[:])
}

// AuthKey returns the 32-byte HMAC key derived from a bearer token. The core
// stores it as "sha256:" + hex(key) (see authKeyDigest).
func AuthKey(token string) [32]byte {
	return domainHash(domainAuthKey, []byte(token))
}

// authKeyDigest is the form in which the core persists an auth key.
func authKeyDigest(key [32]byte) string {
	return "sha256:" + hex.EncodeToString(key[:])
}

// serverProof is hex(HMAC(authKey, server-proof, [signing])).
func serverProof(authKey []byte, signing []byte) string {
	p := domainHMAC(authKey, domainServerProof, signing)
	return hex.EncodeToString(p[:])
}

// ServerProof is the core's proof over a challenge's signing bytes:
// hex(HMAC(authKey, server-proof, [signing])) (spec §2.2).
func ServerProof(authKey []byte, signing []byte) string { return serverProof(authKey, signing) }

// VerifyClientProof reports, in constant time, whether got is the
// lowercase-hex client proof for signing and serverProofHex under authKey
// (spec §2.2): the core's check of auth_response.
func VerifyClientProof(authKey []byte, signing []byte, serverProofHex, got string) bool {
	return verifyHexMAC(clientProofBytes(authKey, signing, serverProofHex), got)
}

// clientProofBytes is HMAC(authKey, client-proof, [signing, serverProof]).
func clientProofBytes(authKey []byte, signing []byte, serverProofHex string) [32]byte {
	return domainHMAC(authKey, domainClientProof, signing, []byte(serverProofHex))
}

// clientProof is the lowercase-hex client proof.
func clientProof(authKey []byte, signing []byte, serverProofHex string) string {
	p := clientProofBytes(authKey, signing, serverProofHex)
	return hex.EncodeToString(p[:])
}

// sessionBinding is H(session-binding, [signing, serverProof, clientProof]).
func sessionBinding(signing []byte, serverProofHex, clientProofHex string) [32]byte {
	return domainHash(domainSessionBinding, signing, []byte(serverProofHex), []byte(clientProofHex))
}

// directionKeys derives the runner→core and core→runner AES-256 keys.
func directionKeys(authKey []byte, binding [32]byte) (clientToCore, coreToClient [32]byte) {
	return domainHMAC(authKey, domainClientToCore, binding[:]),
		domainHMAC(authKey, domainCoreToClient, binding[:])
}

// verifyHexMAC compares a lowercase 64-hex MAC in constant time.
func verifyHexMAC(want [32]byte, got string) bool {
	if len(got) != 64 || !isLowerHex(got) {
		return false
	}
	var b [32]byte
	if _, err := hex.Decode(b[:], []byte(got)); err != nil {
		return false
	}
	return hmac.Equal(want[:], b[:])
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
