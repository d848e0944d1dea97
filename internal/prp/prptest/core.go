package prptest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// DefaultWaitBound bounds each wait of a Core unless WaitBound is set. Inside
// a synctest bubble it is simulated time, so it only ends a test whose
// condition can no longer come true.
const DefaultWaitBound = 10 * time.Second

// pipeHost is the authority of PipeURL: a loopback literal (the dialer
// resolves nothing and pins it) on port 1, which nothing dials because the
// Transport carries the upgrade.
const pipeHost = "127.0.0.1:1"

// Core is a real control.Core for one registration (the far side of the
// protocol), plus a test's ways to reach and observe it. The embedded
// control.Core keeps its whole API (QueueCommand, Ping, Revoke, DropCurrent,
// SendRaw, Snapshot, Wait, ...).
//
// Reach it over Transport with PipeURL from inside a synctest bubble, or
// over loopback with ServeLoopback from a runnerd in another process. The
// methods that take no testing.TB fail the test given to NewCore, so call
// them from that test's goroutine. Cleanup (registered by NewCore) closes
// the core, then the transport, then the loopback server, and waits for
// their goroutines.
type Core struct {
	*control.Core
	// WaitBound bounds WaitFor and WaitResult; 0 means DefaultWaitBound.
	WaitBound time.Duration

	t     testing.TB
	runID string
	tr    *Transport

	srvOnce sync.Once
	srv     *httptest.Server
}

// NewCore returns a core for cfg, closed by t's cleanup.
func NewCore(t testing.TB, cfg control.Config) *Core {
	t.Helper()
	c := &Core{Core: control.NewCore(cfg), t: t, runID: cfg.Identity.RunID}
	c.tr = NewTransport(c.Core)
	t.Cleanup(func() {
		c.Core.Close()
		c.tr.Close()
		if c.srv != nil {
			c.srv.Close()
		}
	})
	return c
}

// Transport is the in-memory path to the core's dial route.
func (c *Core) Transport() *Transport { return c.tr }

// PipeURL is a connect URL for the dial route when the upgrade rides
// Transport: it passes the runner's URL checks and is never dialled.
func (c *Core) PipeURL() string { return "ws://" + pipeHost + prp.ConnectPath(c.runID) }

// ServeLoopback serves the core on a loopback httptest server (started on
// the first call) and returns the ws:// connect URL of its dial route. Not
// for use inside a synctest bubble: a socket is not in the bubble.
func (c *Core) ServeLoopback() string {
	c.srvOnce.Do(func() { c.srv = httptest.NewServer(c.Core) })
	return "ws://" + strings.TrimPrefix(c.srv.URL, "http://") + prp.ConnectPath(c.runID)
}

// Ticket mints a one-use bootstrap ticket.
func (c *Core) Ticket() string {
	c.t.Helper()
	tok, err := c.MintTicket()
	if err != nil {
		c.t.Fatalf("mint ticket: %v", err)
	}
	return tok
}

func (c *Core) bound() time.Duration {
	if c.WaitBound > 0 {
		return c.WaitBound
	}
	return DefaultWaitBound
}

// WaitFor waits, bounded, until cond holds of the core's state and returns
// the snapshot that satisfied it.
func (c *Core) WaitFor(cond func(s control.Snapshot) bool) control.Snapshot {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.bound())
	defer cancel()
	var got control.Snapshot
	if err := c.Wait(ctx, func(s control.Snapshot) bool {
		if cond(s) {
			got = s
			return true
		}
		return false
	}); err != nil {
		c.t.Fatalf("core: condition not reached within %v: %v", c.bound(), err)
	}
	return got
}

// Queue queues a command of type typ with a JSON object payload. Only a
// command the journal refused fails the test: when the immediate delivery
// fails because the current connection is going away (a runner that just
// exited), the command stays journaled as pending and the next connection's
// welcome carries it (control.Core.QueueCommand).
func (c *Core) Queue(typ, payload string) prp.Command {
	c.t.Helper()
	cmd, err := c.QueueCommand(prp.Command{Type: typ, Payload: json.RawMessage(payload)})
	if err != nil && cmd.CommandID == "" {
		c.t.Fatalf("queue %s: %v", typ, err)
	}
	return cmd
}

// WaitResult waits, bounded, for the result of command id and decodes it.
func (c *Core) WaitResult(id string) prp.CommandResultPayload {
	c.t.Helper()
	s := c.WaitFor(func(s control.Snapshot) bool { return s.Results[id] != nil })
	var p prp.CommandResultPayload
	if err := json.Unmarshal(s.Results[id], &p); err != nil {
		c.t.Fatalf("decode result of %s: %v", id, err)
	}
	return p
}

// Events decodes every event the core has committed so far.
func (c *Core) Events() []Event {
	c.t.Helper()
	return DecodeEvents(c.t, c.Snapshot().Events)
}
