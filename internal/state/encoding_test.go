package state

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEncodingKeepsHTMLCharactersRaw pins the bytes runner-state.json has
// always held: records, journal results and the file itself are written
// without HTML escaping (<, > and & stay raw, as the reference's serde_json
// writes them), whichever encoder produces them.
func TestEncodingKeepsHTMLCharactersRaw(t *testing.T) {
	s, cfg := newStore(t)
	require.NoError(t, s.Update(func(tx *Tx) error {
		if err := tx.SetRecord("note", map[string]string{"text": "a<b>&c"}); err != nil {
			return err
		}
		if _, err := tx.BeginCommand(command(1, "cmd_1", "turn.start", `{}`)); err != nil {
			return err
		}
		_, err := tx.RejectCommand("cmd_1", "code_x", "a<b>&c")
		return err
	}))
	file := string(readFile(t, cfg))
	require.Contains(t, file, `"note":{"text":"a<b>&c"}`)
	require.Contains(t, file, `"result":{"code":"code_x","message":"a<b>&c"}`)
	require.NotContains(t, file, `\u003c`)
}

// TestForeignFieldsRoundTripCompact: a field runnerd does not know, written
// with spaces by another writer, is kept; it is compacted once on load, so
// every later write copies it verbatim and the file stays valid JSON.
func TestForeignFieldsRoundTripCompact(t *testing.T) {
	var st State
	require.NoError(t, json.Unmarshal([]byte(`{"schema":"x","foreign": { "a" : [ 1, 2 ] , "b":"c d" }}`), &st))
	b, err := json.Marshal(&st)
	require.NoError(t, err)
	require.True(t, json.Valid(b))
	require.Contains(t, string(b), `"foreign":{"a":[1,2],"b":"c d"}`)
}
