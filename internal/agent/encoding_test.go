package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// TestEncodingEscapesHTMLCharacters pins the bytes of the results the agent
// manager returns: they have always been encoding/json's default form, with
// <, > and & escaped, and the journal stores them as given (compacted, not
// re-encoded), so that form is on disk and on the wire.
func TestEncodingEscapesHTMLCharacters(t *testing.T) {
	require.Equal(t, `{"providerTurnId":"a\u003cb\u003e\u0026c"}`, string(jsonenc.MustMarshalEscaped(map[string]any{"providerTurnId": "a<b>&c"})))
}
