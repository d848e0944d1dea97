package state

import (
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
