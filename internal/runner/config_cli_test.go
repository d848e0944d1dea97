package runner

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLogLevelFlag: --log-level takes debug, info, warn or error (default
// info); anything else is a usage error naming the flag (exit 2).
func TestLogLevelFlag(t *testing.T) {
	require.Equal(t, slog.LevelInfo, mustParse(t, listenArgs()).LogLevel)
	for name, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		require.Equal(t, want, mustParse(t, listenArgs("--log-level", name)).LogLevel, name)
		require.Equal(t, want, mustParse(t, dialArgs("ws://127.0.0.1:1/x", "--log-level="+name)).LogLevel, name)
	}
	for _, bad := range []string{"", "INFO", "warning", "trace", "0"} {
		ue := requireUsage(t, listenArgs("--log-level="+bad), "--log-level", CodeUsage)
		require.Contains(t, ue.Problem, "debug, info, warn or error")
	}
	requireUsage(t, listenArgs("--log-level", "warn", "--log-level", "info"), "--log-level", CodeUsage)
}
