package prp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/testutil/sharedtest"
)

// cryptoVectors mirrors shared/testdata/prp-crypto-vectors.json, computed by
// running the reference server's own functions (read its "about" field).
type cryptoVectors struct {
	Constants struct {
		Protocol          string `json:"protocol"`
		SecureFrameSchema string `json:"secureFrameSchema"`
		NoncePrefixes     struct {
			CoreToClient string `json:"core_to_client"`
			ClientToCore string `json:"client_to_core"`
		} `json:"noncePrefixes"`
	} `json:"constants"`
	Cases      []vectorCase `json:"cases"`
	Primitives struct {
		DomainDigest []struct {
			Domain      string   `json:"domain"`
			PartsHex    []string `json:"partsHex"`
			PreimageHex string   `json:"preimageHex"`
			OutputHex   string   `json:"outputHex"`
		} `json:"domainDigest"`
		DomainHmac []struct {
			KeyHex    string   `json:"keyHex"`
			Domain    string   `json:"domain"`
			PartsHex  []string `json:"partsHex"`
			OutputHex string   `json:"outputHex"`
		} `json:"domainHmac"`
		SecureNonce []struct {
			Prefix   string `json:"prefix"`
			Counter  string `json:"counter"`
			NonceHex string `json:"nonceHex"`
		} `json:"secureNonce"`
		CredentialMaterial []struct {
			Token        string `json:"token"`
			TokenUtf8Hex string `json:"tokenUtf8Hex"`
			CredentialID string `json:"credentialId"`
			AuthKeyHex   string `json:"authKeyHex"`
		} `json:"credentialMaterial"`
	} `json:"primitives"`
	CanonicalJSON struct {
		Vectors []struct {
			Label              string `json:"label"`
			InputJSON          string `json:"inputJson"`
			Canonical          string `json:"canonical"`
			CanonicalUtf8Hex   string `json:"canonicalUtf8Hex"`
			CanonicalSha256Hex string `json:"canonicalSha256Hex"`
		} `json:"vectors"`
		Limits struct {
			MaxDepth int `json:"maxDepth"`
			MaxNodes int `json:"maxNodes"`
			Checks   []struct {
				What   string `json:"what"`
				Result string `json:"result"`
			} `json:"checks"`
		} `json:"limits"`
	} `json:"canonicalJson"`
}

type vectorCase struct {
	Name                  string          `json:"name"`
	Token                 string          `json:"token"`
	TokenUtf8Hex          string          `json:"tokenUtf8Hex"`
	CredentialKind        string          `json:"credentialKind"`
	CredentialID          string          `json:"credentialId"`
	AuthKeyHex            string          `json:"authKeyHex"`
	AuthKeyDigestAsStored string          `json:"authKeyDigestAsStored"`
	ChallengePayload      json.RawMessage `json:"challengePayload"`
	CanonicalChallenge    string          `json:"canonicalChallenge"`
	ServerProof           string          `json:"serverProof"`
	ClientProof           string          `json:"clientProof"`
	BindingHex            string          `json:"bindingHex"`
	SessionID             string          `json:"sessionId"`
	ClientToCoreKeyHex    string          `json:"clientToCoreKeyHex"`
	CoreToClientKeyHex    string          `json:"coreToClientKeyHex"`
	Wire                  struct {
		AuthHello         json.RawMessage `json:"authHello"`
		AuthChallenge     json.RawMessage `json:"authChallenge"`
		AuthChallengeWire string          `json:"authChallengeWire"`
		AuthResponse      json.RawMessage `json:"authResponse"`
	} `json:"wire"`
	Frames struct {
		CoreToClient []vectorFrame `json:"coreToClient"`
		ClientToCore []vectorFrame `json:"clientToCore"`
	} `json:"frames"`
	NegativeFrames []struct {
		What            string          `json:"what"`
		Frame           json.RawMessage `json:"frame"`
		ReferenceResult string          `json:"referenceResult"`
	} `json:"negativeFrames"`
}

type vectorFrame struct {
	Direction     string          `json:"direction"`
	Counter       uint64          `json:"counter"`
	KeyHex        string          `json:"keyHex"`
	NonceHex      string          `json:"nonceHex"`
	AAD           string          `json:"aad"`
	AADHex        string          `json:"aadHex"`
	Plaintext     json.RawMessage `json:"plaintext"`
	PlaintextUtf8 string          `json:"plaintextUtf8"`
	PlaintextHex  string          `json:"plaintextHex"`
	FrameWire     string          `json:"frameWire"`
}

func loadVectors(t *testing.T) *cryptoVectors {
	t.Helper()
	b, err := os.ReadFile(sharedtest.Path(t, "testdata", "prp-crypto-vectors.json"))
	require.NoError(t, err)
	var v cryptoVectors
	require.NoError(t, json.Unmarshal(b, &v))
	require.NotEmpty(t, v.Cases)
	return &v
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

func TestVectorsConstants(t *testing.T) {
	v := loadVectors(t)
	assert.Equal(t, Protocol, v.Constants.Protocol)
	assert.Equal(t, SecureFrameSchema, v.Constants.SecureFrameSchema)
	assert.Equal(t, prefixCoreToClient, v.Constants.NoncePrefixes.CoreToClient)
	assert.Equal(t, prefixClientToCore, v.Constants.NoncePrefixes.ClientToCore)
}

func TestVectorsPrimitives(t *testing.T) {
	v := loadVectors(t)
	for _, d := range v.Primitives.DomainDigest {
		var parts [][]byte
		for _, p := range d.PartsHex {
			parts = append(parts, unhex(t, p))
		}
		var pre bytes.Buffer
		writeDomain(&pre, d.Domain, parts)
		assert.Equal(t, d.PreimageHex, hex.EncodeToString(pre.Bytes()), d.Domain)
		got := domainHash(d.Domain, parts...)
		assert.Equal(t, d.OutputHex, hex.EncodeToString(got[:]), d.Domain)
	}
	for _, d := range v.Primitives.DomainHmac {
		var parts [][]byte
		for _, p := range d.PartsHex {
			parts = append(parts, unhex(t, p))
		}
		got := domainHMAC(unhex(t, d.KeyHex), d.Domain, parts...)
		assert.Equal(t, d.OutputHex, hex.EncodeToString(got[:]), d.Domain)
	}
	for _, d := range v.Primitives.SecureNonce {
		h := halfChannel{prefix: d.Prefix}
		var counter uint64
		for _, c := range d.Counter {
			counter = counter*10 + uint64(c-'0')
		}
		n := h.nonce(counter)
		assert.Equal(t, d.NonceHex, hex.EncodeToString(n[:]), "%s %s", d.Prefix, d.Counter)
	}
	for _, d := range v.Primitives.CredentialMaterial {
		assert.Equal(t, d.TokenUtf8Hex, hex.EncodeToString([]byte(d.Token)))
		assert.Equal(t, d.CredentialID, CredentialID(d.Token))
		k := AuthKey(d.Token)
		assert.Equal(t, d.AuthKeyHex, hex.EncodeToString(k[:]))
	}
}

// TestPRP50_CanonicalJSONVectors: canonical JSON and key derivation match
// the known-answer vectors computed with Node (spec §15 scenario 50).
func TestPRP50_CanonicalJSONVectors(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.CanonicalJSON.Vectors {
		t.Run(c.Label, func(t *testing.T) {
			got, err := Canonical(json.RawMessage(c.InputJSON))
			require.NoError(t, err)
			assert.Equal(t, c.Canonical, string(got))
			assert.Equal(t, c.CanonicalUtf8Hex, hex.EncodeToString(got))
			sum := sha256.Sum256(got)
			assert.Equal(t, c.CanonicalSha256Hex, hex.EncodeToString(sum[:]))
		})
	}
}

func TestPRP50_CanonicalJSONLimits(t *testing.T) {
	v := loadVectors(t)
	require.Equal(t, MaxCanonicalDepth, v.CanonicalJSON.Limits.MaxDepth)
	require.Equal(t, MaxCanonicalNodes, v.CanonicalJSON.Limits.MaxNodes)
	nested := func(n int) json.RawMessage {
		return json.RawMessage(strings.Repeat("[", n) + strings.Repeat("]", n))
	}
	zeros := func(n int) json.RawMessage {
		return json.RawMessage("[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]")
	}
	inputs := map[string]any{
		"65 nested arrays (innermost at depth 64)":          nested(65),
		"66 nested arrays (innermost at depth 65)":          nested(66),
		"array of 9999 zeros (10000 nodes incl. the array)": zeros(9999),
		"array of 10000 zeros (10001 nodes)":                zeros(10000),
		"NaN (not reachable from JSON text)":                math.NaN(),
	}
	for _, c := range v.CanonicalJSON.Limits.Checks {
		in, ok := inputs[c.What]
		if !ok {
			// A sparse array cannot be expressed in Go or in JSON text.
			t.Logf("no Go equivalent for %q (reference result %s)", c.What, c.Result)
			continue
		}
		_, err := Canonical(in)
		switch c.Result {
		case "ok":
			assert.NoError(t, err, c.What)
		case ErrCanonicalTooLarge.Error():
			assert.ErrorIs(t, err, ErrCanonicalTooLarge, c.What)
		case errCanonicalInvalid.Error():
			assert.ErrorIs(t, err, errCanonicalInvalid, c.What)
		default:
			t.Fatalf("unknown reference result %q", c.Result)
		}
	}
}

func TestVectorsCases(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			// Credential material.
			assert.Equal(t, c.TokenUtf8Hex, hex.EncodeToString([]byte(c.Token)))
			assert.Equal(t, c.CredentialID, CredentialID(c.Token))
			authKey := AuthKey(c.Token)
			assert.Equal(t, c.AuthKeyHex, hex.EncodeToString(authKey[:]))
			assert.Equal(t, c.AuthKeyDigestAsStored, authKeyDigest(authKey))

			// Signing bytes, proofs, binding, keys.
			signing, err := Canonical(c.ChallengePayload)
			require.NoError(t, err)
			require.Equal(t, c.CanonicalChallenge, string(signing))
			assert.Equal(t, c.ServerProof, serverProof(authKey[:], signing))
			assert.Equal(t, c.ClientProof, clientProof(authKey[:], signing, c.ServerProof))
			binding := sessionBinding(signing, c.ServerProof, c.ClientProof)
			assert.Equal(t, c.BindingHex, hex.EncodeToString(binding[:]))
			c2c, c2r := directionKeys(authKey[:], binding)
			assert.Equal(t, c.ClientToCoreKeyHex, hex.EncodeToString(c2c[:]))
			assert.Equal(t, c.CoreToClientKeyHex, hex.EncodeToString(c2r[:]))

			// The runner recomputes the signing bytes from the challenge as
			// it arrives on the wire (payload minus serverProof).
			ch, err := parseChallenge([]byte(c.Wire.AuthChallengeWire))
			require.NoError(t, err)
			assert.Equal(t, c.CanonicalChallenge, string(ch.signing))
			assert.Equal(t, c.ServerProof, ch.ServerProof)
			assert.True(t, verifyHexMAC(domainHMAC(authKey[:], domainServerProof, ch.signing), ch.ServerProof))

			runner, err := newSession(roleRunner, authKey[:], signing, c.ServerProof, c.ClientProof)
			require.NoError(t, err)
			core, err := newSession(roleCore, authKey[:], signing, c.ServerProof, c.ClientProof)
			require.NoError(t, err)
			assert.Equal(t, c.SessionID, runner.ID)
			assert.Equal(t, c.SessionID, core.ID)

			// Sealing is deterministic: both directions must reproduce the
			// reference frames byte for byte, and open back to the plaintext.
			for _, f := range c.Frames.CoreToClient {
				checkFrameMeta(t, core.seal, f)
				sealed, err := core.Seal([]byte(f.PlaintextUtf8))
				require.NoError(t, err)
				assert.Equal(t, f.FrameWire, string(sealed), "core seals counter %d", f.Counter)
				pt, err := runner.Open([]byte(f.FrameWire))
				require.NoError(t, err)
				assert.Equal(t, f.PlaintextUtf8, string(pt))
				assert.Equal(t, f.PlaintextHex, hex.EncodeToString(pt))
				assert.JSONEq(t, string(f.Plaintext), string(pt))
			}
			for _, f := range c.Frames.ClientToCore {
				checkFrameMeta(t, runner.seal, f)
				sealed, err := runner.Seal([]byte(f.PlaintextUtf8))
				require.NoError(t, err)
				assert.Equal(t, f.FrameWire, string(sealed), "runner seals counter %d", f.Counter)
				pt, err := core.Open([]byte(f.FrameWire))
				require.NoError(t, err)
				assert.Equal(t, f.PlaintextUtf8, string(pt))
			}

			// Rejected frames, each against a fresh receiver expecting 0.
			for _, n := range c.NegativeFrames {
				fresh, err := newSession(roleCore, authKey[:], signing, c.ServerProof, c.ClientProof)
				require.NoError(t, err)
				_, err = fresh.Open(n.Frame)
				require.ErrorIs(t, err, ErrSecureFrame, n.What)
				switch {
				case strings.Contains(n.What, "tag byte"):
					assert.ErrorIs(t, err, ErrFrameAuth, n.What)
				case strings.Contains(n.What, "counter 1"):
					assert.ErrorIs(t, err, ErrFrameCounter, n.What)
				default:
					t.Fatalf("unclassified negative frame %q", n.What)
				}
				// Fail closed: the direction stays failed even for the
				// genuine counter-0 frame.
				_, err = fresh.Open([]byte(c.Frames.ClientToCore[0].FrameWire))
				assert.ErrorIs(t, err, ErrSecureFrame)
			}
		})
	}
}

func checkFrameMeta(t *testing.T, h halfChannel, f vectorFrame) {
	t.Helper()
	n := h.nonce(f.Counter)
	assert.Equal(t, f.NonceHex, hex.EncodeToString(n[:]))
	assert.Equal(t, f.AAD, string(h.aad(f.Counter)))
	assert.Equal(t, f.AADHex, hex.EncodeToString(h.aad(f.Counter)))
}

// TestVectorsWireMessages checks that our message types read the reference's
// example wire envelopes without loss.
func TestVectorsWireMessages(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Cases {
		var hello struct {
			Protocol string       `json:"protocol"`
			Version  int          `json:"version"`
			Kind     string       `json:"kind"`
			Payload  HelloPayload `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(c.Wire.AuthHello, &hello))
		assert.Equal(t, KindAuthHello, hello.Kind)
		assert.Equal(t, c.CredentialID, hello.Payload.CredentialID)

		var resp struct {
			Kind    string              `json:"kind"`
			Payload AuthResponsePayload `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(c.Wire.AuthResponse, &resp))
		assert.Equal(t, KindAuthResponse, resp.Kind)
		assert.Equal(t, c.ClientProof, resp.Payload.ClientProof)
	}
}

// TestVectorsPlaintextShapes: the reference's decrypted core frames decode
// into our types and re-encode to the same JSON, so every field name and
// optionality matches the wire.
func TestVectorsPlaintextShapes(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Cases {
		for _, f := range c.Frames.CoreToClient {
			env, err := DecodeEnvelope([]byte(f.PlaintextUtf8))
			require.NoError(t, err, c.Name)
			out, err := MarshalEnvelope(env)
			require.NoError(t, err)
			assert.JSONEq(t, f.PlaintextUtf8, string(out), "%s %s envelope", c.Name, env.Kind)
			switch env.Kind {
			case KindWelcome:
				var w welcomeWire
				require.NoError(t, json.Unmarshal([]byte(f.PlaintextUtf8), &w))
				out, err := jsonenc.Marshal(w.Payload)
				require.NoError(t, err)
				assert.JSONEq(t, string(env.Payload), string(out), "%s welcome payload", c.Name)
			case KindCommand:
				var cmd Command
				require.NoError(t, env.DecodePayload(&cmd))
				out, err := jsonenc.Marshal(cmd)
				require.NoError(t, err)
				assert.JSONEq(t, string(env.Payload), string(out), "%s command", c.Name)
			default:
				t.Fatalf("unexpected core frame kind %q", env.Kind)
			}
		}
	}
}
