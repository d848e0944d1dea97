package runner

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// TestEncodingKeepsHTMLCharactersRaw pins the bytes runnerd builds for
// results, facts and command_result payloads: no HTML escaping, as
// JSON.stringify writes them.
func TestEncodingKeepsHTMLCharactersRaw(t *testing.T) {
	require.Equal(t, `{"code":"c","message":"a<b>&c"}`, string(codeResult("c", "a<b>&c")))
	b, err := jsonenc.Marshal(prp.CommandResultPayload{CommandID: "a<b>&c", Result: []byte(`{"m":"<&>"}`)})
	require.NoError(t, err)
	require.Equal(t, `{"commandId":"a<b>&c","controllerSeq":0,"commandType":"","status":"","result":{"m":"<&>"}}`, string(b))
}
