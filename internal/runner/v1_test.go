package runner

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
)

// versionCore is a minimal core built from control.Handshake and sealed
// frames, for what control.Core cannot do: select PRP v1. It lowers the hello's
// protocolMax to maxVersion before the core half reads it (the hello is not
// covered by the proofs), commits contiguous events and ACKs them.
type versionCore struct {
	t          *testing.T
	store      *control.MemoryCredentialStore
	maxVersion int
	// noWarm drops warmTransitionVersion from the hello, so the welcome
	// offers no warm rotation (warm_test.go).
	noWarm bool

	mu      sync.Mutex // guards acked, events, hellos, changed, commands and results
	acked   int64
	events  []json.RawMessage // committed envelopes as received
	hellos  []map[string]any  // auth_hello frames as the runner sent them
	changed chan struct{}
	wg      sync.WaitGroup

	// commands are delivered one at a time, the next after the previous
	// one's result (goal_v1_test.go); results holds them by commandId.
	commands []json.RawMessage
	results  map[string]prp.CommandResultPayload
}

// newVersionCore serves the core over prptest's in-memory transport; its
// cleanup closes the pipes, which ends every connection's loop.
func newVersionCore(t *testing.T) (*versionCore, *prptest.Transport) {
	c := &versionCore{t: t, store: control.NewMemoryCredentialStore(), changed: make(chan struct{})}
	tr := prptest.NewTransport(c)
	t.Cleanup(func() {
		tr.Close()
		c.wg.Wait()
	})
	return c, tr
}

func (c *versionCore) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *versionCore) wait(cond func() bool) {
	c.t.Helper()
	deadline := time.After(waitBound)
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			c.t.Fatal("version core: condition not reached")
		}
	}
}

type helloRewriter struct {
	ws  *websocket.Conn
	c   *versionCore
	max int
	n   int
}

func (h *helloRewriter) ReadMsg(ctx context.Context) ([]byte, error) {
	_, b, err := h.ws.Read(ctx)
	if err != nil || h.n > 0 {
		return b, err
	}
	h.n++
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return b, nil
	}
	h.c.mu.Lock()
	h.c.hellos = append(h.c.hellos, m)
	h.c.mu.Unlock()
	var cp map[string]any
	_ = json.Unmarshal(b, &cp)
	if p, ok := cp["payload"].(map[string]any); ok {
		p["protocolMax"] = h.max
		if h.c.noWarm {
			delete(p, "warmTransitionVersion")
		}
	}
	return json.Marshal(cp)
}

func (h *helloRewriter) WriteMsg(ctx context.Context, b []byte) error {
	return h.ws.Write(ctx, websocket.MessageText, b)
}

func (c *versionCore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	c.wg.Add(1)
	defer c.wg.Done()
	defer ws.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), waitBound)
	defer cancel()
	c.mu.Lock()
	maxV := c.maxVersion
	c.mu.Unlock()
	h := control.Handshake{
		Identity: testIdentity, RunnerVersion: testVersion, RunnerDigest: testDigest,
		Store: c.store, ConnectionID: "connection_v",
		AckedSourceSeq: func() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.acked },
	}
	sess, _, err := h.Run(ctx, &helloRewriter{ws: ws, c: c, max: maxV})
	if err != nil {
		return
	}
	if c.deliverNext(ctx, ws, sess) != nil {
		return
	}
	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			return
		}
		env, err := sess.OpenEnvelope(frame)
		if err == nil && env.Kind == prp.KindCommandResult {
			if c.recordResult(env.Payload) && c.deliverNext(ctx, ws, sess) != nil {
				return
			}
			continue
		}
		if err != nil || env.Kind != prp.KindEvent {
			continue
		}
		var p struct {
			SourceSeq int64 `json:"sourceSeq"`
		}
		_ = json.Unmarshal(env.Payload, &p)
		pt, _ := prp.MarshalEnvelope(env)
		c.mu.Lock()
		if p.SourceSeq == c.acked+1 && env.Version == sess.Version {
			c.acked = p.SourceSeq
			c.events = append(c.events, pt)
			c.notifyLocked()
		}
		acked := c.acked
		c.mu.Unlock()
		ack, _ := sess.NewControl(prp.KindAck, prp.AckPayload{AckedSourceSeq: acked})
		out, err := sess.SealEnvelope(ack)
		if err != nil || ws.Write(ctx, websocket.MessageText, out) != nil {
			return
		}
	}
}

// TestPRP23_47_V1Downgrade: auth_hello offers version 2 with range
// 1..2 (scenario 47); a core selecting 1 gets v2-only events as
// runner.diagnostic {reasonCode: event_requires_prp_v2} under v1
// envelopes; the next v2 connection replays the real payload with a new
// sequence number (scenario 23, prp.md §8.2).
func TestPRP23_47_V1Downgrade(t *testing.T) {
	synctest.Test(t, testV1Downgrade)
}

func testV1Downgrade(t *testing.T) {
	core, tr := newVersionCore(t)
	core.maxVersion = 1
	dir := filepath.Join(t.TempDir(), "state")
	st, err := state.Open(state.Config{Dir: dir, Identity: testIdentity})
	require.NoError(t, err)
	require.NoError(t, st.Update(func(tx *state.Tx) error {
		_, err := tx.Enqueue(state.Event{Type: "session.goal.updated", Priority: state.P1, Payload: json.RawMessage(`{"objective":"ship it"}`)})
		return err
	}))
	require.NoError(t, st.Close())

	h := &harness{t: t, stateDir: dir, connectURL: "ws://127.0.0.1:1" + prp.ConnectPath(testIdentity.RunID)} // tr carries it
	cfg := h.config(false)
	start := func() *running {
		tok, err := core.store.IssueTicket(time.Minute, time.Now())
		require.NoError(t, err)
		ticket, err := config.NewBootstrapTicket(tok)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		r := &running{cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- runLoop(ctx, cfg, ticket, testLogger(), options{Transport: tr}) }()
		return r
	}

	r1 := start()
	core.wait(func() bool { return len(core.events) >= 1 })
	r1.cancel()
	require.NoError(t, r1.wait(t))

	core.mu.Lock()
	hello := core.hellos[0]
	first := core.events[0]
	core.maxVersion = 2
	core.mu.Unlock()
	require.EqualValues(t, 2, hello["version"], "scenario 47")
	hp := hello["payload"].(map[string]any)
	require.EqualValues(t, 1, hp["protocolMin"])
	require.EqualValues(t, 2, hp["protocolMax"])

	var env struct {
		Version int `json:"version"`
		Payload struct {
			SourceSeq uint64          `json:"sourceSeq"`
			EventType string          `json:"eventType"`
			Schema    string          `json:"schema"`
			Payload   json.RawMessage `json:"payload"`
		} `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(first, &env))
	require.Equal(t, 1, env.Version)
	require.Equal(t, "runner.diagnostic", env.Payload.EventType)
	require.Equal(t, "paperclip.prp.event.v1", env.Payload.Schema)
	require.JSONEq(t, `{"reasonCode":"event_requires_prp_v2","originalEventType":"session.goal.updated"}`, string(env.Payload.Payload))
	require.NotContains(t, string(first), "ship it", "the real payload never rides a v1 link")

	// Next v2 connection: the real payload again, under a new sequence number.
	r2 := start()
	core.wait(func() bool {
		for _, e := range core.events {
			if strings.Contains(string(e), "ship it") {
				return true
			}
		}
		return false
	})
	r2.cancel()
	require.NoError(t, r2.wait(t))
	core.mu.Lock()
	defer core.mu.Unlock()
	for _, e := range core.events {
		if strings.Contains(string(e), "ship it") {
			require.NoError(t, json.Unmarshal(e, &env))
			require.Equal(t, 2, env.Version)
			require.Equal(t, "session.goal.updated", env.Payload.EventType)
			require.Greater(t, env.Payload.SourceSeq, uint64(1))
		}
	}
}
