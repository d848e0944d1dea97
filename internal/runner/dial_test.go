package runner

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
)

// fixedResolver resolves every name to its addresses.
type fixedResolver []netip.Addr

func (r fixedResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r, nil
}

// TestDialNameCheckedBeforeState: a ws:// name that resolves to an address
// that is not loopback is refused (connect_url_invalid) before runnerd
// writes any state, so the next start has nothing to "recover".
func TestDialNameCheckedBeforeState(t *testing.T) {
	h := newHarness(t, nil)
	h.connectURL = "ws://runner.example.test" + prp.ConnectPath(testIdentity.RunID)
	cfg := h.config(false)
	ticket, err := config.NewBootstrapTicket(h.core.Ticket())
	require.NoError(t, err)
	err = runLoop(context.Background(), cfg, ticket, nil, options{Resolver: fixedResolver{netip.MustParseAddr("10.1.2.3")}})
	require.Equal(t, config.CodeConnectURLInvalid, config.CodeOf(err), "%v", err)
	require.NoDirExists(t, h.stateDir)
}
