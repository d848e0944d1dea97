package prp

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLowerHexCodec(t *testing.T) {
	src := make([]byte, 1031)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	for n := 0; n <= len(src); n += 1 + n/3 {
		enc := appendLowerHex([]byte("prefix"), src[:n])
		require.Equal(t, "prefix"+hex.EncodeToString(src[:n]), string(enc), "n=%d", n)
		dst := make([]byte, n)
		require.True(t, decodeLowerHex(dst, enc[len("prefix"):]), "n=%d", n)
		require.Equal(t, src[:n], dst)
	}
	// Every byte value in every lane position of a SWAR step is checked.
	valid := []byte("0123456789abcdef")
	for pos := range 16 {
		for c := range 256 {
			s := bytes.Repeat([]byte("0"), 16)
			s[pos] = byte(c)
			dst := make([]byte, 8)
			want := bytes.IndexByte(valid, byte(c)) >= 0
			assert.Equal(t, want, decodeLowerHex(dst, s), "pos %d char %#x", pos, c)
			if want {
				ref, err := hex.DecodeString(string(s))
				require.NoError(t, err)
				assert.Equal(t, ref, dst)
			}
		}
	}
	assert.False(t, decodeLowerHex(make([]byte, 1), []byte("abc")))
}

func TestSealOpenRoundTripAndCounters(t *testing.T) {
	key := AuthKey("t")
	runner, err := newSession(RoleRunner, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	core, err := newSession(RoleCore, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	for i := range 50 {
		pt := bytes.Repeat([]byte{byte(i)}, i*37)
		f, err := runner.Seal(pt)
		require.NoError(t, err)
		got, err := core.Open(f)
		require.NoError(t, err)
		assert.Equal(t, string(pt), string(got))
		f, err = core.Seal(pt)
		require.NoError(t, err)
		got, err = runner.Open(f)
		require.NoError(t, err)
		assert.Equal(t, string(pt), string(got))
	}
	// A frame sealed for one direction never opens in the other.
	f, err := runner.Seal([]byte("x"))
	require.NoError(t, err)
	_, err = runner.Open(f)
	assert.ErrorIs(t, err, ErrSecureFrame)

	// The counter stops at 2^53−1: the core could not read a larger one.
	runner.seal.counter = maxFrameCounter + 1
	_, err = runner.Seal([]byte("x"))
	assert.ErrorIs(t, err, ErrCounterExhausted)
}
