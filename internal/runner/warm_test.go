package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// nextIdentity is the run a warm rotation hands the runner to.
var nextIdentity = prp.Identity{
	RunnerInstanceID: testIdentity.RunnerInstanceID, EnvironmentLeaseID: testIdentity.EnvironmentLeaseID,
	RunID: "run_2", NormalizedSessionID: testIdentity.NormalizedSessionID, TurnID: "turn_2", ItemID: "item_2",
}

// warmRig is a runner with a live fake agent (one finished turn) and the
// way the core reaches it before and after a rotation.
type warmRig struct {
	h        *harness
	run      *running
	provider map[string]any // the run.prepare provider descriptor
	metaFile string         // fakeacp --record-meta: session/new, load, resume
	// connection is the new run's paperclipNextAuthority.connection.
	connection map[string]any
	// reach connects the core to the new run where the mode needs it.
	reach func(t *testing.T)
	pid   any // the agent pid session.open reported
	// seed is the rest of the run.prepare payload (authorizedTools), sent
	// again in every run.attach.
	seed map[string]json.RawMessage
}

// newWarmRig starts runnerd (listen or dial mode) over loopback with the
// test pcwrap, prepares fakeacp, opens its session and runs one turn.
func newWarmRig(t *testing.T, listen bool, extra ...string) *warmRig {
	return newWarmRigWith(t, listen, nil, nil, nil, extra...)
}

// newWarmRigWith is newWarmRig with a tweak of the core's config, more
// fakeacp flags and a seed (the rest of run.prepare's payload).
func newWarmRigWith(t *testing.T, listen bool, tweak func(*control.Config), agentFlags []string, seed map[string]json.RawMessage, extra ...string) *warmRig {
	h := newHarness(t, tweak)
	meta := filepath.Join(t.TempDir(), "meta.ndjson")
	wr := &warmRig{h: h, metaFile: meta, seed: seed}
	args := append([]string{"--pcwrap-path", testbin.Path(t, "pcwrap")}, extra...)
	if listen {
		addr := make(chan string, 1)
		wr.run = h.start(h.config(true, args...), options{OnListening: func(a string) { addr <- a }})
		var a string
		select {
		case a = <-addr:
		case <-time.After(waitBound):
			t.Fatal("runner did not listen")
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		require.NoError(t, h.core.Connect(ctx, "ws://"+a+prp.ConnectPath(testIdentity.RunID)))
		host, port := splitHostPort(t, a)
		wr.connection = map[string]any{"mode": "listen", "listenAddress": host, "listenPort": port,
			"listenPath": prp.ConnectPath(nextIdentity.RunID)}
		wr.reach = func(t *testing.T) {
			// The path rotates when the ack reaches the runner: until then
			// the listener answers 400, so try again, bounded.
			deadline := time.Now().Add(waitBound)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), waitBound)
				err := h.core.Connect(ctx, "ws://"+a+prp.ConnectPath(nextIdentity.RunID))
				cancel()
				if err == nil {
					return
				}
				require.True(t, time.Now().Before(deadline), "the core could not reach the rotated path: %v", err)
				time.Sleep(5 * time.Millisecond)
			}
		}
	} else {
		wr.run = h.start(h.config(false, args...), options{})
		wr.connection = map[string]any{"mode": "connect",
			"connectUrl": strings.TrimSuffix(h.connectURL, prp.ConnectPath(testIdentity.RunID)) + prp.ConnectPath(nextIdentity.RunID)}
		wr.reach = func(*testing.T) {}
	}
	wr.provider = map[string]any{"kind": "acpx", "agent": "claude", "command": fakeacpBin(t),
		"args": append([]string{"--record-meta", meta}, agentFlags...), "cwd": t.TempDir(), "model": "fake-model", "instructions": "be brief"}
	prepare := map[string]any{"provider": wr.provider}
	for k, v := range seed {
		prepare[k] = v
	}
	res := h.waitResult(h.queue("run.prepare", string(jsonenc.MustMarshal(prepare))).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	res = h.waitResult(h.queue("session.open", `{"reuse":"same_session"}`).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	wr.pid = processIDOf(t, res.Result)
	require.NotNil(t, wr.pid)
	require.Equal(t, "completed", h.waitResult(h.queue("turn.start", `{"text":"echo hello"}`).CommandID).Status)
	h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == 1 &&
			s.AckedSourceSeq == int64(len(s.Events))
	})
	return wr
}

func processIDOf(t *testing.T, result json.RawMessage) any {
	t.Helper()
	var r struct {
		ProcessID any `json:"processId"`
	}
	require.NoError(t, json.Unmarshal(result, &r))
	return r.ProcessID
}

func splitHostPort(t *testing.T, a string) (string, int) {
	t.Helper()
	i := strings.LastIndexByte(a, ':')
	require.Positive(t, i)
	var port int
	for _, c := range a[i+1:] {
		port = port*10 + int(c-'0')
	}
	return a[:i], port
}

// attachPayload is a run.attach for next with the rig's provider (tweaked).
func (wr *warmRig) attachPayload(next prp.Identity, tweak func(provider map[string]any)) string {
	p := map[string]any{}
	for k, v := range wr.provider {
		p[k] = v
	}
	if tweak != nil {
		tweak(p)
	}
	m := map[string]any{"provider": p, "paperclipNextAuthority": map[string]any{"identity": next, "connection": wr.connection}}
	for k, v := range wr.seed {
		m[k] = v
	}
	return string(jsonenc.MustMarshal(m))
}

// rotate queues a run.attach to nextIdentity and waits until the core
// acknowledged warm_transition_activated.
func (wr *warmRig) rotate(t *testing.T) control.Snapshot {
	h := wr.h
	attach := h.queue(prp.CommandRunAttach, wr.attachPayload(nextIdentity, nil))
	h.waitCore(func(s control.Snapshot) bool { return s.Warm != nil || s.Identity == nextIdentity })
	wr.reach(t)
	s := h.waitCore(func(s control.Snapshot) bool { return s.Warm == nil && s.Identity == nextIdentity })
	require.Len(t, s.Epochs, 1)
	var res prp.CommandResultPayload
	require.NoError(t, json.Unmarshal(s.Epochs[0].Results[attach.CommandID], &res))
	require.Equal(t, "completed", res.Status, string(res.Result))
	return s
}

// metaMethods lists the session/new, load and resume calls fakeacp saw.
func (wr *warmRig) metaMethods(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(wr.metaFile)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Method string `json:"method"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		out = append(out, m.Method)
	}
	return out
}

// TestPRP24_WarmAttach ports prp.md §15 scenario 24 to the runner, in
// listen and dial mode over loopback with a live fakeacp under pcwrap:
// the old outbox is ACKed, the receipt round-trips, the runner reconnects
// as the new run with the same lease (listen mode: same socket, rotated
// path), the activation handshake completes, and the new run's turn runs
// on the same agent process with no session/new or session/load. Each
// identity's events are contiguous from 1 and none is re-emitted.
func TestPRP24_WarmAttach(t *testing.T) {
	for name, listen := range map[string]bool{"listen": true, "dial": false} {
		t.Run(name, func(t *testing.T) {
			wr := newWarmRig(t, listen)
			h := wr.h
			before := h.core.Snapshot()
			s := wr.rotate(t)
			old := prptest.DecodeEvents(t, s.Epochs[0].Events)
			require.Len(t, old, len(before.Events), "nothing more on the old identity after the receipt")

			res := h.waitResult(h.queue("turn.start", `{"text":"echo again"}`).CommandID)
			require.Equal(t, "completed", res.Status, string(res.Result))
			s = h.waitCore(func(s control.Snapshot) bool {
				return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == 1
			})
			evs := prptest.DecodeEvents(t, s.Events)
			for i, e := range evs {
				require.EqualValues(t, i+1, e.SourceSeq, "the new identity's events are contiguous from 1")
			}
			for _, raw := range s.Events {
				var env struct {
					RunID string `json:"runId"`
				}
				require.NoError(t, json.Unmarshal(raw, &env))
				require.Equal(t, nextIdentity.RunID, env.RunID)
			}
			require.NotEmpty(t, prptest.OfType(evs, "turn.started"))
			require.Empty(t, prptest.OfType(evs, "session.started"), "no session restart")
			require.Len(t, prptest.OfType(evs, "workspace.ready"), 1, "run.attach readies the root for the new run (workspace.md §6)")
			for i, e := range evs {
				if e.EventType == "workspace.ready" {
					require.Equal(t, "runtime.phase.changed", evs[i-1].EventType)
				}
			}

			// The same agent process: session.open adopts it.
			res = h.waitResult(h.queue("session.open", `{"reuse":"same_session"}`).CommandID)
			require.Equal(t, "completed", res.Status, string(res.Result))
			require.Equal(t, wr.pid, processIDOf(t, res.Result), "the agent pid is unchanged across the rotation")
			require.Equal(t, []string{"session/new"}, wr.metaMethods(t), "no session/new or session/load after the rotation")
		})
	}
}

// TestWarmAttachRefusals: a run.attach that breaks a rule is refused with
// its code before any effect, and the old run keeps working under its
// identity.
func TestWarmAttachRefusals(t *testing.T) {
	wr := newWarmRig(t, false)
	h := wr.h
	same := nextIdentity
	same.RunID = testIdentity.RunID
	moved := nextIdentity
	moved.NormalizedSessionID = "session_other"
	otherRunner := nextIdentity
	otherRunner.RunnerInstanceID = "runner_other"
	otherLease := nextIdentity
	otherLease.EnvironmentLeaseID = "env_other"
	cases := []struct {
		name    string
		payload string
		code    string
	}{
		{"same runId", wr.attachPayload(same, nil), codeWarmAttachInvalid},
		{"normalizedSessionId changed", wr.attachPayload(moved, nil), codeWarmAttachInvalid},
		{"runnerInstanceId changed", wr.attachPayload(otherRunner, nil), codeWarmAttachInvalid},
		{"environmentLeaseId changed", wr.attachPayload(otherLease, nil), codeWarmAttachInvalid},
		{"model", wr.attachPayload(nextIdentity, func(p map[string]any) { p["model"] = "other-model" }), codeWarmAttachIncompatible},
		{"instructions", wr.attachPayload(nextIdentity, func(p map[string]any) { p["instructions"] = "be verbose" }), codeWarmAttachIncompatible},
		{"descriptor", wr.attachPayload(nextIdentity, func(p map[string]any) { p["args"] = []string{"--record-meta", wr.metaFile, "--x"} }), codeWarmAttachIncompatible},
		{"catalog", func() string {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(wr.attachPayload(nextIdentity, nil)), &m))
			m["authorizedTools"] = json.RawMessage(warmTestCatalog(t))
			return string(jsonenc.MustMarshal(m))
		}(), codeWarmAttachIncompatible},
		{"listen connection in dial mode", func() string {
			saved := wr.connection
			defer func() { wr.connection = saved }()
			wr.connection = map[string]any{"mode": "listen", "listenAddress": "127.0.0.1", "listenPort": 1, "listenPath": prp.ConnectPath(nextIdentity.RunID)}
			return wr.attachPayload(nextIdentity, nil)
		}(), codeWarmAttachInvalid},
		{"ws:// not loopback", func() string {
			saved := wr.connection
			defer func() { wr.connection = saved }()
			wr.connection = map[string]any{"mode": "connect", "connectUrl": "ws://192.0.2.1:80" + prp.ConnectPath(nextIdentity.RunID)}
			return wr.attachPayload(nextIdentity, nil)
		}(), codeWarmAttachInvalid},
		{"ca bundle with ws://", func() string {
			saved := wr.connection
			defer func() { wr.connection = saved }()
			wr.connection = map[string]any{"mode": "connect", "connectUrl": saved["connectUrl"], "caBundlePath": "/etc/hostname"}
			return wr.attachPayload(nextIdentity, nil)
		}(), codeWarmAttachInvalid},
	}
	for _, c := range cases {
		res := h.waitResult(h.queue(prp.CommandRunAttach, c.payload).CommandID)
		require.Equal(t, "rejected", res.Status, c.name)
		require.Equal(t, c.code, resultCodeOf(t, res), c.name+": "+string(res.Result))
	}
	s := h.core.Snapshot()
	require.Nil(t, s.Warm)
	require.Equal(t, testIdentity, s.Identity)
	res := h.waitResult(h.queue("turn.start", `{"text":"echo still here"}`).CommandID)
	require.Equal(t, "completed", res.Status, "the old run keeps working")
	h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == 2
	})
	// And the exact attach still rotates.
	wr.rotate(t)
}

// warmTestCatalog is a valid one-operation authorizedTools catalog (the
// rig's run has none, so its catalogDigest differs).
func warmTestCatalog(t *testing.T) []byte {
	op := catalog.Operation{OperationID: "issue.comment", Version: 1, Description: "Comment on the task.",
		InputSchema:    json.RawMessage(`{"type":"object"}`),
		ResponseSchema: json.RawMessage(`{"type":"object"}`)}
	cat, err := json.Marshal(map[string]any{"schema": catalog.Schema, "schemaVersion": 1,
		"catalogDigest": catalog.Digest([]catalog.Operation{op}), "operations": []catalog.Operation{op}})
	require.NoError(t, err)
	return cat
}

// TestWarmAttachNeedsV2WithWarmVersion: run.attach on a PRP v1 connection,
// or on a v2 one whose welcome offered no warmTransitionVersion, is
// refused warm_attach_unsupported before any effect (prp.md §9.5), and the
// old run keeps working.
func TestWarmAttachNeedsV2WithWarmVersion(t *testing.T) {
	for name, tc := range map[string]struct {
		maxVersion int
		noWarm     bool
	}{"v1": {1, false}, "v2 without warmTransitionVersion": {2, true}} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				core, tr := newVersionCore(t)
				core.maxVersion, core.noWarm = tc.maxVersion, tc.noWarm
				attach := jsonenc.MustMarshal(map[string]any{"provider": map[string]any{"kind": "acpx", "agent": "claude"},
					"paperclipNextAuthority": map[string]any{"identity": nextIdentity,
						"connection": map[string]any{"mode": "connect", "connectUrl": "ws://127.0.0.1:1" + prp.ConnectPath(nextIdentity.RunID)}}})
				for i, c := range []struct{ typ, payload string }{{prp.CommandRunAttach, string(attach)}, {"session.snapshot", `{}`}} {
					core.commands = append(core.commands, rawCommand(t, prp.Command{Schema: prp.CommandSchemaV1, CommandID: cmdID(i + 1),
						ControllerSeq: uint64(i + 1), Type: c.typ, IssuedAt: fixedIssuedAt, Payload: json.RawMessage(c.payload)}))
				}
				h := &harness{t: t, stateDir: filepath.Join(t.TempDir(), "state"), connectURL: "ws://127.0.0.1:1" + prp.ConnectPath(testIdentity.RunID)}
				tok, err := core.store.IssueTicket(time.Minute, time.Now())
				require.NoError(t, err)
				ticket, err := config.NewBootstrapTicket(tok)
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- runLoop(ctx, h.config(false), ticket, testLogger(), options{Transport: tr}) }()
				core.wait(func() bool { return len(core.results) == 2 })
				cancel()
				require.NoError(t, <-done)
				core.mu.Lock()
				defer core.mu.Unlock()
				res := core.results[cmdID(1)]
				require.Equal(t, "rejected", res.Status)
				require.Equal(t, codeWarmAttachUnsupported, resultCode(res.Result), string(res.Result))
				require.Equal(t, "completed", core.results[cmdID(2)].Status, "the old run keeps working")
			})
		})
	}
}

// TestWarmAttachInexactReceipt: a receipt that differs from the runner's
// own by one field is refused. In an activated welcome: the runner keeps
// refusing it (no warm_transition_activated goes out) and activates with
// the exact one. In command_result_ack: runnerd stops with the state still
// "prepared" under the old identity; the core, which acknowledged, settles
// forward, and the runner relaunched as the new identity rolls forward to
// it and runs the next turn on the same agent.
func TestWarmAttachInexactReceipt(t *testing.T) {
	t.Run("welcome", func(t *testing.T) {
		wr := newWarmRig(t, false)
		wr.h.core.TamperWarmReceipts(0, 2)
		s := wr.rotate(t)
		require.Equal(t, nextIdentity, s.Identity)
		require.GreaterOrEqual(t, s.Authentications, 4, "two activated welcomes refused, the third accepted")
		res := wr.h.waitResult(wr.h.queue("turn.start", `{"text":"echo after"}`).CommandID)
		require.Equal(t, "completed", res.Status, string(res.Result))
	})
	for _, expired := range []bool{false, true} {
		name := "command_result_ack"
		if expired {
			name += "_lease_expired"
		}
		t.Run(name, func(t *testing.T) { inexactAckSettlesForward(t, expired) })
	}
}

// inexactAckSettlesForward is TestWarmAttachInexactReceipt's
// command_result_ack case; with expired, the receipt's lease ran out
// while runnerd was gone, which must not keep the core from settling
// forward (the server settles from its own records).
func inexactAckSettlesForward(t *testing.T, expired bool) {
	wr := newWarmRig(t, false)
	h := wr.h
	h.core.TamperWarmReceipts(1, 0)
	h.queue(prp.CommandRunAttach, wr.attachPayload(nextIdentity, nil))
	err := wr.run.wait(t)
	require.Error(t, err)
	require.Contains(t, err.Error(), "another warm transition receipt")
	st := h.readState()
	require.Equal(t, state.WarmTransitionSchema, st.Schema)
	require.Equal(t, testIdentity.RunID, st.RunID, "the old identity until the core's word")
	w, err := st.PendingWarm()
	require.NoError(t, err)
	require.Equal(t, state.WarmPrepared, w.Phase)

	if expired {
		receipt := h.core.Snapshot().Warm
		require.NotNil(t, receipt)
		lease, ok := h.core.Store().LeaseState(receipt.LeaseID, time.Now())
		require.True(t, ok)
		lease.Token = "lease_expired_in_the_outage"
		lease.ExpiresAtUnixMs = time.Now().Add(-time.Second).UnixMilli()
		h.core.Store().AddLease(lease)
	}
	require.True(t, h.core.SettleWarmForward())
	cfg := h.config(false, "--pcwrap-path", testbin.Path(t, "pcwrap"))
	cfg.Identity = nextIdentity
	u, err := url.Parse(wr.connection["connectUrl"].(string))
	require.NoError(t, err)
	cfg.ConnectURL = u
	h.start(cfg, options{})
	h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "runner.reconciled")) == 1
	})
	res := h.waitResult(h.queue("turn.start", `{"text":"echo after"}`).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	res = h.waitResult(h.queue("session.open", `{"reuse":"same_session"}`).CommandID)
	require.Equal(t, wr.pid, processIDOf(t, res.Result), "the same agent")
}

// TestWarmCommandQueuedWhileActivationAckSends: a command queued the moment
// the core shows the rotation done, while its warm_transition_activated_ack
// is still on the way out, goes out behind that ack: the runner takes the
// new identity's commands only after it (prp.md §9.5), and the command's
// result arrives.
func TestWarmCommandQueuedWhileActivationAckSends(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex // guards sent
	var sent []string // what the core sent from the ack on, in order
	note := func(what string) {
		mu.Lock()
		if what == "ack" || len(sent) > 0 {
			sent = append(sent, what)
		}
		mu.Unlock()
	}
	wr := newWarmRigWith(t, false, func(cc *control.Config) {
		cc.Outbound = func(kind string, payload any) (any, error) {
			switch kind {
			case prp.KindWarmTransitionActivatedAck:
				note("ack")
				select { // hold the ack until the command is queued, bounded
				case <-release:
				case <-time.After(waitBound):
				}
				note("ack sent")
			case prp.KindCommand:
				note("command")
			}
			return payload, nil
		}
	}, nil, nil)
	h := wr.h
	h.queue(prp.CommandRunAttach, wr.attachPayload(nextIdentity, nil))
	h.waitCore(func(s control.Snapshot) bool { return s.Warm == nil && s.Identity == nextIdentity })
	cmd := h.queue("turn.start", `{"text":"echo after"}`)
	close(release)
	res := h.waitResult(cmd.CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"ack", "ack sent", "command"}, sent)
}

// TestWarmAttachToolBridgeCarriesOver: the tool bridge survives the
// rotation with the agent, and a call made in the new run carries the new
// run's identity as its correlation (agent Config.Correlation reads
// state.Store.Identity), is answered through the same bridge, and the
// turn completes: nothing is restarted or re-emitted.
func TestWarmAttachToolBridgeCarriesOver(t *testing.T) {
	wr := newWarmRigWith(t, false, nil, []string{"--mcp-http"}, map[string]json.RawMessage{"authorizedTools": warmTestCatalog(t)})
	h := wr.h
	var before struct {
		Bridge struct {
			Port int `json:"port"`
		} `json:"bridge"`
	}
	_, err := h.readState().Record(agentRecord, &before)
	require.NoError(t, err)
	require.NotZero(t, before.Bridge.Port)
	wr.rotate(t)

	require.Equal(t, "completed", h.waitResult(h.queue("turn.start", `{"text":"mcp-call paperclip.issue.comment {\"body\":\"hi\"}"}`).CommandID).Status)
	s := h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "semantic_tool.input")) == 1
	})
	var in struct {
		SemanticTool struct {
			CallID      string          `json:"callId"`
			OperationID string          `json:"operationId"`
			Correlation json.RawMessage `json:"correlation"`
			Input       json.RawMessage `json:"input"`
		} `json:"semantic_tool"`
	}
	require.NoError(t, json.Unmarshal(prptest.OfType(prptest.DecodeEvents(t, s.Events), "semantic_tool.input")[0].Payload, &in))
	require.JSONEq(t, `{"runId":"`+nextIdentity.RunID+`","normalizedSessionId":"`+nextIdentity.NormalizedSessionID+
		`","turnId":"`+nextIdentity.TurnID+`","itemId":"`+nextIdentity.ItemID+`"}`, string(in.SemanticTool.Correlation))
	// While the call is pending (its turn active) the session is not
	// quiescent: the snapshot says so and a run.attach is refused.
	snap := h.waitResult(h.queue("session.snapshot", `{"quiesceForWarmAttach":true}`).CommandID)
	require.Contains(t, string(snap.Result), `"warmAttachReady":false`)
	third := nextIdentity
	third.RunID = "run_3"
	res := h.waitResult(h.queue(prp.CommandRunAttach, wr.attachPayload(third, nil)).CommandID)
	require.Equal(t, "rejected", res.Status)
	require.Equal(t, codeWarmAttachNotReady, resultCodeOf(t, res))
	p, err := json.Marshal(map[string]any{"callId": in.SemanticTool.CallID, "operationId": in.SemanticTool.OperationID,
		"input": in.SemanticTool.Input, "sourceEventType": "semantic_tool.input", "correlation": in.SemanticTool.Correlation,
		"result": json.RawMessage(`{"id":"c-warm"}`), "isError": false})
	require.NoError(t, err)
	res = h.waitResult(h.queue("semantic_tool.result", string(p)).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	h.waitCore(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(t, s.Events), "run.terminal")) == 1
	})
	var after struct {
		Bridge struct {
			Port int `json:"port"`
		} `json:"bridge"`
	}
	_, err = h.readState().Record(agentRecord, &after)
	require.NoError(t, err)
	require.Equal(t, before.Bridge.Port, after.Bridge.Port, "the same bridge")
	require.Equal(t, []string{"session/new"}, wr.metaMethods(t))
}

// TestWarmAttachEventAfterPrepare: an event the runner commits after the
// prepared write (here the agent's death, as the chaos wave's agent kill
// did) must not reach the core ahead of the run.attach result, since the
// core binds the receipt to its cursor when the result arrives (prp.md
// §9.5 step 2). The prepared-write hook places the event exactly there,
// on the live connection and, as the wave's socket drop did, after the
// connection was lost and the runner re-authenticated but before its
// connected handler ran. Each time the same runnerd rotates, and the
// receipt binds the cursor of the prepare.
func TestWarmAttachEventAfterPrepare(t *testing.T) {
	for _, drop := range []bool{false, true} {
		name := "connected"
		if drop {
			name = "reconnect"
		}
		t.Run(name, func(t *testing.T) {
			var armed atomic.Bool
			var hookErr atomic.Value // error: what the hook could not arrange
			var wr *warmRig
			prev := warmKillPoint
			t.Cleanup(func() { warmKillPoint = prev }) // after the runner's own cleanup stops it
			warmKillPoint = func(point string) {
				if point != killPrepared || !armed.CompareAndSwap(true, false) {
					return
				}
				if err := placeEventAfterPrepare(wr, drop); err != nil {
					hookErr.Store(err)
				}
			}
			wr = newWarmRig(t, false)
			h := wr.h
			acked := h.core.Snapshot().AckedSourceSeq
			armed.Store(true)
			h.queue(prp.CommandRunAttach, wr.attachPayload(nextIdentity, nil))
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			var stopped error // runLoop's result, if runnerd stopped instead
			err := h.core.Wait(ctx, func(s control.Snapshot) bool {
				select {
				case stopped = <-wr.run.done:
					wr.run.done <- stopped // the cleanup's wait sees it too
					return true
				default:
				}
				return s.Warm == nil && s.Identity == nextIdentity
			})
			if stopped == nil {
				select {
				case stopped = <-wr.run.done:
					wr.run.done <- stopped
				default:
				}
			}
			s := h.core.Snapshot()
			if err != nil || stopped != nil || s.Identity != nextIdentity {
				t.Fatalf("no rotation (%v): runnerd stopped: %v; hook: %v; core: identity %s, pending transition %v, acked %d",
					err, stopped, hookErr.Load(), s.Identity.RunID, s.Warm != nil, s.AckedSourceSeq)
			}
			require.Nil(t, hookErr.Load(), "the hook placed the event")
			require.False(t, armed.Load(), "the prepared hook ran")
			require.Len(t, s.Epochs, 1)
			require.Equal(t, acked, s.Epochs[0].Receipt.OldAckedSourceSeq, "the receipt binds the prepare's cursor")
		})
	}
}

// placeEventAfterPrepare runs on the runner's ack routine right after the
// prepared write: with drop, the core drops the connection and the hook
// waits for the runner to authenticate again (its connected handler waits
// for this routine); then the agent is killed and the hook waits until
// the runner committed the event that reports it.
func placeEventAfterPrepare(wr *warmRig, drop bool) error {
	deadline := time.Now().Add(waitBound)
	poll := func(what string, done func() bool) error {
		for !done() {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not within %v", what, waitBound)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}
	if drop {
		auths := wr.h.core.Snapshot().Authentications
		wr.h.core.DropCurrent()
		if err := poll("re-authentication", func() bool { return wr.h.core.Snapshot().Authentications > auths }); err != nil {
			return err
		}
	}
	pid, ok := wr.pid.(float64)
	if !ok {
		return fmt.Errorf("agent pid %v", wr.pid)
	}
	if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill the agent: %w", err)
	}
	var last string
	err := poll("an event after the prepare", func() bool {
		st, err := state.Read(wr.h.stateDir)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprint(st.HighestSourceSeq(), st.AckedSourceSeq, len(st.Outbox))
		return st.HighestSourceSeq() > st.AckedSourceSeq
	})
	if err != nil {
		return fmt.Errorf("%w (last %s)", err, last)
	}
	return nil
}

// TestWarmActivatedAckLost: the core applied warm_transition_activated but
// its ack died with the connection (the chaos wave's half-open during the
// activation). The runner, still "activating", can only reconnect with the
// transition's id; the core answers that hello with the activated welcome
// again and acknowledges the repeated warm_transition_activated without
// applying it twice, and the new run's next turn runs.
func TestWarmActivatedAckLost(t *testing.T) {
	var lost atomic.Bool
	wr := newWarmRigWith(t, false, func(cc *control.Config) {
		cc.Outbound = func(kind string, payload any) (any, error) {
			if kind == prp.KindWarmTransitionActivatedAck && lost.CompareAndSwap(false, true) {
				return nil, errors.New("the ack is lost with the connection")
			}
			return payload, nil
		}
	}, nil, nil)
	h := wr.h
	s := wr.rotate(t)
	// The core shows the activation applied before it builds the ack.
	require.Eventually(t, lost.Load, waitBound, time.Millisecond, "the first activated ack was lost")
	require.Len(t, s.Epochs, 1, "the activation is applied once")
	res := h.waitResult(h.queue("turn.start", `{"text":"echo after"}`).CommandID)
	require.Equal(t, "completed", res.Status, string(res.Result))
	require.Len(t, h.core.Snapshot().Epochs, 1, "the repeated activation archived nothing more")
}
