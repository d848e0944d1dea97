package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// keysOf decodes one JSON log line keeping duplicate keys, which a map
// would hide.
func keysOf(t *testing.T, line []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, k.(string))
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	return keys
}

func count(keys []string, k string) int {
	n := 0
	for _, x := range keys {
		if x == k {
			n++
		}
	}
	return n
}

// TestComponentJoined: three layers that each add their component (runnerd,
// then the agent manager, then its ACP client) give one "component" key
// with the joined name, and the attributes each layer added survive.
func TestComponentJoined(t *testing.T) {
	var buf bytes.Buffer
	root := New(slog.NewJSONHandler(&buf, nil)).With("component", "runnerd")
	l := root.With("pid", 7).With("component", "agent").With("session", "s1", "component", "acpx")
	l.Info("hello", "n", 1)
	line := buf.Bytes()
	keys := keysOf(t, line)
	require.Equal(t, 1, count(keys, componentKey), "line %s", line)
	var m map[string]any
	require.NoError(t, json.Unmarshal(line, &m))
	require.Equal(t, "runnerd.agent.acpx", m[componentKey])
	require.EqualValues(t, 7, m["pid"])
	require.Equal(t, "s1", m["session"])
	require.EqualValues(t, 1, m["n"])

	// The parent is untouched by its children.
	buf.Reset()
	root.Info("parent")
	m = nil
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	require.Equal(t, "runnerd", m[componentKey])
	require.NotContains(t, m, "pid")
}

// TestComponentInsideGroup: a "component" inside a group is an ordinary
// attribute of that group, and a later top-level component is not possible
// (slog's groups nest everything after them), so nothing is joined.
func TestComponentInsideGroup(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.NewJSONHandler(&buf, nil)).With("component", "prp").WithGroup("peer").With("component", "x")
	l.Info("m")
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	require.Equal(t, "prp", m[componentKey])
	require.Equal(t, map[string]any{"component": "x"}, m["peer"])
}

// TestTextHandler: the text handler gets the same single key.
func TestTextHandler(t *testing.T) {
	var buf bytes.Buffer
	New(slog.NewTextHandler(&buf, nil)).With("component", "runnerd").With("component", "state").Warn("w")
	require.Equal(t, 1, strings.Count(buf.String(), "component="), buf.String())
	require.Contains(t, buf.String(), "component=runnerd.state")
}

// TestNewHandlerIdempotent: wrapping twice does not double the work.
func TestNewHandlerIdempotent(t *testing.T) {
	h := newHandler(slog.DiscardHandler)
	require.Same(t, h, newHandler(h))
}
