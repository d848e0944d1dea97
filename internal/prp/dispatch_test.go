package prp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// dispatchTestBound bounds each wait of the dispatch tests; reaching it is
// a failure, never the expected path.
const dispatchTestBound = 20 * time.Second

// TestAckAppliedWhileCommandBlocks: a command handler that blocks (a
// session.open waiting for its agent) does not stop ACKs from reaching
// OnControl; the command still runs once released, and its
// command_result_ack waits for the handler. On the single dispatch routine
// the ACK waited behind the handler.
func TestAckAppliedWhileCommandBlocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dispatchTestBound)
	defer cancel()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(t, err)

	var mu sync.Mutex
	var kinds []string
	changed := make(chan struct{}, 1)
	record := func(k string) {
		mu.Lock()
		kinds = append(kinds, k)
		mu.Unlock()
		kick(changed)
	}
	waitKinds := func(what string, cond func([]string) bool) {
		t.Helper()
		for {
			mu.Lock()
			ok := cond(kinds)
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v (seen %v)", what, ctx.Err(), kinds)
			}
		}
	}
	entered := make(chan *prp.Envelope, 1)
	release := make(chan struct{})
	var handlerReturned bool
	cfg := prp.ClientConfig{Dialer: dialTarget(t, core), Ticket: ticket}
	cfg.OnControl = func(ctx context.Context, c *prp.Conn, env *prp.Envelope) error {
		switch env.Kind {
		case prp.KindCommand:
			entered <- env
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			require.NoError(t, c.Send(ctx, resultEnvelope(t, env)))
			mu.Lock()
			handlerReturned = true
			mu.Unlock()
		case prp.KindCommandResultAck:
			mu.Lock()
			returned := handlerReturned
			mu.Unlock()
			require.True(t, returned, "command_result_ack applied before its command's handler returned")
		}
		record(env.Kind)
		return nil
	}
	client, done := startClient(t, ctx, cfg)
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected }))

	// A terminal command, so the core answers its result with a command_result_ack.
	cmd, err := core.QueueCommand(prp.Command{Type: "runner.shutdown", Payload: []byte(`{}`)})
	require.NoError(t, err)
	var got *prp.Envelope
	select {
	case got = <-entered:
	case <-ctx.Done():
		t.Fatal("command never reached its handler")
	}
	require.Equal(t, prp.KindCommand, got.Kind)

	// While the handler blocks, an event is committed and its ACK applied.
	require.NoError(t, client.Send(ctx, eventEnvelope(t, 1)))
	waitKinds("ack while the command blocks", func(k []string) bool { return len(k) == 1 && k[0] == prp.KindAck })

	close(release)
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Results[cmd.CommandID] != nil }))
	waitKinds("command, then its result ack", func(k []string) bool {
		return len(k) == 3 && k[1] == prp.KindCommand && k[2] == prp.KindCommandResultAck
	})
	cancel()
	<-done
}
