package prp

import (
	"testing"
)

// FuzzHandshakeMessages: the decoders of every peer-supplied handshake and
// control message fail cleanly on any input, and what they accept is
// consistent.
func FuzzHandshakeMessages(f *testing.F) {
	for _, s := range []string{
		`{"protocol":"paperclip.runner","version":2,"kind":"auth_challenge","payload":{"credentialId":"c","credentialKind":"bootstrap","clientNonce":"n","serverNonce":"s","runnerInstanceId":"r","environmentLeaseId":"e","runId":"u","normalizedSessionId":"s","turnId":"t","itemId":"i","runnerVersion":"v","runnerDigest":"d","selectedVersion":2,"credentialLeaseId":null,"credentialExpiresAt":"x","credentialExpiresAtUnixMs":1,"revocationEpoch":0,"serverProof":"p","extra":[1]}}`,
		`{"protocol":"paperclip.runner","version":2,"kind":"auth_challenge","payload":{"credentialId":"c","credentialKind":"bootstrap","clientNonce":"n","serverNonce":"s","runnerInstanceId":"r","environmentLeaseId":"e","runId":"u","normalizedSessionId":"s","turnId":"t","itemId":"i","runnerVersion":"v","runnerDigest":"d","selectedVersion":2,"credentialLeaseId":null,"credentialExpiresAt":"x","credentialExpiresAtUnixMs":1,"revocationEpoch":0,"durability":"durability.indexed_state.v1","outputBodies":"history.output_bodies.v1","commandResume":{"controllerEpoch":null,"lastControllerCommandSeq":3},"eventEpochLimit":8,"serverProof":"p"}}`,
		`{"protocol":"paperclip.runner","version":2,"kind":"auth_hello","payload":{"credentialId":"c","clientNonce":"n","protocolMin":1,"protocolMax":2,"runnerInstanceId":"r","environmentLeaseId":"e","runId":"u","normalizedSessionId":"s","turnId":"t","itemId":"i","runnerVersion":"v","runnerDigest":"d","resume":{"lastControllerCommandSeq":0,"nextSourceEventSeq":1,"ackedSourceSeq":0}}}`,
		`{"protocol":"paperclip.runner","version":2,"kind":"auth_response","payload":{"credentialId":"c","clientNonce":"n","serverNonce":"s","clientProof":"p"}}`,
		`{"protocol":"paperclip.runner","version":2,"kind":"ack","runId":"r","payload":{"ackedSourceSeq":3}}`,
		`{"protocol":"paperclip.runner","version":1.0,"kind":"auth_challenge","payload":{}}`,
		`[]`, `null`, `{"payload":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if ch, err := parseChallenge(msg); err == nil {
			again, err := Canonical(ch.signing)
			if err != nil || string(again) != string(ch.signing) {
				t.Fatalf("challenge signing bytes are not canonical: %q", ch.signing)
			}
			// The durability checks read only what parseChallenge kept.
			_ = (&ClientHandshake{IndexedState: true}).checkChallengeDurability(ch)
		}
		_, _ = ParseAuthHello(msg)
		_, _ = ParseAuthResponse(msg, 2)
		if env, err := DecodeEnvelope(msg); err == nil {
			b, err := MarshalEnvelope(env)
			if err != nil {
				t.Fatal(err)
			}
			env2, err := DecodeEnvelope(b)
			if err != nil || env2.Kind != env.Kind || env2.Identity != env.Identity {
				t.Fatalf("envelope does not survive a round trip: %v", err)
			}
		}
	})
}
