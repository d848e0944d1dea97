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

// TestNextConnectionAuthenticatesWhileCommandBlocks: a command still
// running when its connection drops (a session.open whose agent's output
// waits for ACKs, prp.md §8.5) does not hold back the next connection's
// OnAuthenticated, which is where the runner applies the welcome's cursor
// and attaches its sender: the command's wait may depend on it. On one
// routine per client the two waited for each other until the command's
// own bound.
func TestNextConnectionAuthenticatesWhileCommandBlocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dispatchTestBound)
	defer cancel()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(t, err)

	entered := make(chan struct{})
	second := make(chan struct{}) // closed by the second connection's OnAuthenticated
	var mu sync.Mutex
	var auths, calls int
	returned := make(chan struct{})
	cfg := prp.ClientConfig{Dialer: dialTarget(t, core), Ticket: ticket, ReconnectDelay: time.Millisecond}
	cfg.OnAuthenticated = func(ctx context.Context, c *prp.Conn, w *prp.Welcome) error {
		mu.Lock()
		auths++
		n := auths
		mu.Unlock()
		if n == 2 {
			close(second)
		}
		return nil
	}
	cfg.OnControl = func(ctx context.Context, c *prp.Conn, env *prp.Envelope) error {
		if env.Kind != prp.KindCommand {
			return nil
		}
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n > 1 {
			return nil // the core's re-delivery on the next connection
		}
		close(entered)
		select {
		case <-second:
		case <-ctx.Done():
			return ctx.Err()
		}
		close(returned)
		return nil
	}
	_, done := startClient(t, ctx, cfg)
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected }))

	_, err = core.QueueCommand(prp.Command{Type: "session.open", Payload: []byte(`{}`)})
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("command never reached its handler")
	}
	core.DropCurrent()
	select {
	case <-second:
	case <-ctx.Done():
		t.Fatal("the next connection's OnAuthenticated waited for the blocked command, which waited for it")
	}
	select {
	case <-returned:
	case <-ctx.Done():
		t.Fatal("the released command never returned")
	}
	cancel()
	<-done
}

// TestNewestConnectionSetUpLast: a connection's OnAuthenticated that has
// not yet called AwaitPrevious (its setup: the runner attaches its sender
// there) holds back a newer connection's, so the newest connection is
// always the one set up last, even when its predecessor died meanwhile.
func TestNewestConnectionSetUpLast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dispatchTestBound)
	defer cancel()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(t, err)

	entered, release, third := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var auths int
	var setups []int
	cfg := prp.ClientConfig{Dialer: dialTarget(t, core), Ticket: ticket, ReconnectDelay: time.Millisecond}
	cfg.OnAuthenticated = func(ctx context.Context, c *prp.Conn, w *prp.Welcome) error {
		mu.Lock()
		auths++
		n := auths
		mu.Unlock()
		if n == 2 {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		setups = append(setups, n)
		mu.Unlock()
		if n == 3 {
			close(third)
		}
		c.AwaitPrevious(ctx)
		return nil
	}
	_, done := startClient(t, ctx, cfg)
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Authentications == 1 }))
	core.DropCurrent()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the second connection never reached OnAuthenticated")
	}
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Authentications == 2 && s.Connected }))
	core.DropCurrent()
	require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Authentications == 3 }))
	close(release)
	select {
	case <-third:
	case <-ctx.Done():
		t.Fatal("the third connection never reached OnAuthenticated")
	}
	mu.Lock()
	require.Equal(t, []int{1, 2, 3}, setups, "a newer connection was set up before an older one")
	mu.Unlock()
	cancel()
	<-done
}
