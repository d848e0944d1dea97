package codexschema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func load(t *testing.T) *Validator {
	t.Helper()
	v, err := Load(Dir())
	require.NoError(t, err)
	return v
}

// TestGoldenTranscriptMatchesSchema: every line runnerd sent and every line
// fakecodex sent in the golden transcripts is valid for its method under
// the pinned schema.
func TestGoldenTranscriptMatchesSchema(t *testing.T) {
	v := load(t)
	files, err := filepath.Glob(filepath.Join("..", "fakecodex", "testdata", "*.ndjson"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Empty(t, v.Transcript(b), f)
	}
}

// TestValidatorRefuses: the validator is live on each rule it claims.
func TestValidatorRefuses(t *testing.T) {
	v := load(t)
	cases := map[string]string{
		"bad params":                `{"dir":"in","msg":{"id":1,"method":"turn/start","params":{"threadId":"t"}}}`,
		"unknown method":            `{"dir":"in","msg":{"id":1,"method":"turn/nope","params":{}}}`,
		"server method from client": `{"dir":"in","msg":{"method":"turn/started","params":{}}}`,
		"bad notification":          `{"dir":"out","msg":{"method":"item/agentMessage/delta","params":{"delta":1}}}`,
		"orphan response":           `{"dir":"out","msg":{"id":9,"result":{}}}`,
		"bad response": `{"dir":"in","msg":{"id":1,"method":"turn/interrupt","params":{"threadId":"t","turnId":"u"}}}
{"dir":"out","msg":{"id":1,"result":[]}}`,
		"bad error": `{"dir":"in","msg":{"id":1,"method":"turn/interrupt","params":{"threadId":"t","turnId":"u"}}}
{"dir":"out","msg":{"id":1,"error":{"code":"x"}}}`,
		"bad answer": `{"dir":"out","msg":{"id":"s1","method":"item/tool/call","params":{"threadId":"t","turnId":"u","callId":"c","tool":"x","arguments":{}}}}
{"dir":"in","msg":{"id":"s1","result":{"success":true}}}`,
	}
	for name, tr := range cases {
		errs := v.Transcript([]byte(tr))
		require.NotEmpty(t, errs, name)
		require.True(t, strings.HasPrefix(errs[0].Error(), "line "), name)
	}
	// And the good forms of the same messages pass.
	ok := `{"dir":"in","msg":{"id":1,"method":"turn/interrupt","params":{"threadId":"t","turnId":"u"}}}
{"dir":"out","msg":{"id":1,"result":{}}}
{"dir":"out","msg":{"id":"s1","method":"item/tool/call","params":{"threadId":"t","turnId":"u","callId":"c","tool":"x","arguments":{}}}}
{"dir":"in","msg":{"id":"s1","result":{"success":true,"contentItems":[]}}}
{"dir":"out","text":"junk"}`
	require.Empty(t, v.Transcript([]byte(ok)))
}
