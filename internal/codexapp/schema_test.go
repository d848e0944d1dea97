package codexapp

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// TestToolAnswerMatchesPinnedSchema validates the item/tool/call answer
// against the protocol's generated schema (a pinned copy: testdata/schema),
// and checks it still carries codex.md §4's {success, contentItems}.
func TestToolAnswerMatchesPinnedSchema(t *testing.T) {
	f, err := os.Open("testdata/schema/DynamicToolCallResponse.json")
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("DynamicToolCallResponse.json", doc))
	sch, err := c.Compile("DynamicToolCallResponse.json")
	require.NoError(t, err)
	for _, isErr := range []bool{false, true} {
		b, err := json.Marshal(ToolAnswer(`{"ok":true}`, isErr))
		require.NoError(t, err)
		var v any
		require.NoError(t, json.Unmarshal(b, &v))
		require.NoError(t, sch.Validate(v))
		m := v.(map[string]any)
		require.Equal(t, !isErr, m["success"])
		require.Equal(t, []any{map[string]any{"type": "inputText", "text": `{"ok":true}`}}, m["contentItems"])
	}
	// The validator is live: the old shape alone is refused.
	var old any
	require.NoError(t, json.Unmarshal([]byte(`{"success":true,"contentItems":[]}`), &old))
	require.Error(t, sch.Validate(old))
}
