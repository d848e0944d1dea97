package prp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEncodingKeepsHTMLCharactersRaw pins the plaintext of a control
// envelope: payload and envelope are written as JSON.stringify writes them,
// with <, > and & raw.
func TestEncodingKeepsHTMLCharactersRaw(t *testing.T) {
	sess := &Session{Version: ProtocolVersion, Identity: Identity{RunnerInstanceID: "r<1>&"}}
	env, err := sess.NewControl(KindPong, map[string]string{"note": "a<b>&c"})
	require.NoError(t, err)
	require.Equal(t, `{"note":"a<b>&c"}`, string(env.Payload))
	b, err := MarshalEnvelope(env)
	require.NoError(t, err)
	require.Contains(t, string(b), `"runnerInstanceId":"r<1>&"`)
	require.Contains(t, string(b), `"payload":{"note":"a<b>&c"}`)
}
