package sessiondir

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestDecodePayload(t *testing.T) {
	p, err := DecodePayload(b64(`{"command":"sh","args":["-c","x",3,true],"cwd":"/w","env":{"A":"1","B":2,"C":null,"D":{},"A":"3"}}`))
	require.NoError(t, err)
	assert.Equal(t, Payload{Command: "sh", Args: []string{"-c", "x", "3", "true"}, Cwd: "/w", Env: [][2]string{{"A", "3"}, {"B", "2"}, {"C", "null"}}}, p)

	p, err = DecodePayload(b64(`{"command":"cat","args":"notarray","cwd":5}`))
	require.NoError(t, err)
	assert.Equal(t, Payload{Command: "cat"}, p)

	// Node-lenient base64: whitespace anywhere, padding optional.
	raw := b64(`{"command":"cat"}`)
	p, err = DecodePayload(" " + raw[:5] + "\n" + raw[5:len(raw)-1])
	require.NoError(t, err)
	assert.Equal(t, "cat", p.Command)

	for _, bad := range []string{"", "!!!!", b64(`[]`), b64(`{"command":""}`), b64(`{"command":1}`), b64(`{"args":[]}`), b64(`{"command":"x","args":[{}]}`), b64(`{"command":"x","env":{"A":`)} {
		_, err := DecodePayload(bad)
		assert.Equal(t, ErrPayload, err, "%q", bad)
	}
}

func FuzzDecodePayload(f *testing.F) {
	for _, s := range []string{b64(`{"command":"cat"}`), b64(`{"command":"sh","args":["-c"],"env":{"A":"b"}}`), "", "====", "e30"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := DecodePayload(s)
		if err != nil {
			if err != ErrPayload {
				t.Fatalf("non-fixed error %v", err)
			}
			return
		}
		if p.Command == "" {
			t.Fatal("empty command accepted")
		}
	})
}
