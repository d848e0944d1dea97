package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCorruptStateNamesWhatIsWrong: a state file of the wrong shape gets an
// error that says what is wrong (the top level, or the field and both
// kinds), never the file's content.
func TestCorruptStateNamesWhatIsWrong(t *testing.T) {
	s, cfg := newStore(t)
	enqueue(t, s, p1("runner.connected"))
	require.NoError(t, s.Close())
	good := string(readFile(t, cfg))
	path := filepath.Join(cfg.Dir, FileName)
	writeLegacy(t, cfg, []byte(good)) // a damaged old-format directory
	for _, tc := range []struct{ file, want string }{
		{`[1,2,3]`, "state file: top level is an array, want an object"},
		{`"runner.connected"`, "state file: top level is a string, want an object"},
		{`12345`, "state file: top level is a number, want an object"},
		{`true`, "state file: top level is a boolean, want an object"},
		{strings.Replace(good, `"nextSourceSeq":2`, `"nextSourceSeq":"2"`, 1), "state file: field nextSourceSeq is a string, want an integer"},
		{strings.Replace(good, `"nextSourceSeq":2`, `"nextSourceSeq":98765432109876543210`, 1), "state file: field nextSourceSeq is a number, want an integer"},
		{strings.Replace(good, `"outbox":[`, `"outbox":[[],`, 1), "state file: field outbox is an array, want an object"},
		{strings.Replace(good, `"runId":"`, `"runId":{},"x":"`, 1), "state file: field runId is an object, want a string"},
	} {
		require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o600))
		_, err := Open(cfg)
		require.ErrorIs(t, err, errCorruptState, tc.file)
		require.Contains(t, err.Error(), tc.want)
		require.NotContains(t, err.Error(), "98765432109876543210", "errors never quote file content")
		require.NotContains(t, err.Error(), "runner.connected", "errors never quote file content")
	}
}
