package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// TestCommandSchema: a script's session.goal.* steps go out under the v2
// command schema (runnerd refuses them under v1); the rest under v1.
func TestCommandSchema(t *testing.T) {
	for _, typ := range []string{"session.goal.get", "session.goal.set", "session.goal.clear"} {
		require.Equal(t, prp.CommandSchemaV2, commandSchema(typ), typ)
		b, err := json.Marshal(prp.Command{Schema: commandSchema(typ), CommandID: "c", ControllerSeq: 1, Type: typ, IssuedAt: "t", Payload: []byte(`{}`)})
		require.NoError(t, err)
		_, err = prp.DecodeCommand(b)
		require.NoError(t, err, "runnerd admits it: %s", typ)
	}
	require.Equal(t, prp.CommandSchemaV1, commandSchema("turn.start"))
}
