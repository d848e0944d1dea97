package runner

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// TestIdleTimeoutWithoutAnyConnection: a warm runner that no server ever
// reaches (listen mode nobody dials; dial mode at an address nothing
// serves) ends at --idle-timeout-ms with exit 0, leaving its state as found
// rather than "suspending" (a suspend's ACK could never arrive). Before,
// it waited for that ACK for ever. The wait is a real, short bound: the
// timeout is 50 ms, the test allows waitBound.
func TestIdleTimeoutWithoutAnyConnection(t *testing.T) {
	for _, listen := range []bool{true, false} {
		name := "dial"
		if listen {
			name = "listen"
		}
		t.Run(name, func(t *testing.T) {
			h := newPipeHarness(t, nil)
			cfg := h.config(listen, "--lifecycle-mode", "warm", "--idle-timeout-ms", "50")
			if !listen {
				h.core.Transport().Close() // nothing answers the dial
			}
			r := h.start(cfg, options{})
			err := r.wait(t)
			require.NoError(t, err)
			require.Equal(t, config.ExitOK, config.ExitCode(err))
			st := h.readState()
			require.NotEqual(t, state.Suspending, st.Lifecycle)
			require.NotEqual(t, state.Suspended, st.Lifecycle)
			for _, e := range st.Outbox {
				require.NotContains(t, string(e.Envelope), prp.EventRunnerSuspending)
			}
		})
	}
}
