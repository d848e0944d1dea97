package prp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

var nextIdentity = Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_1", RunID: "run_2",
	NormalizedSessionID: "session_1", TurnID: "turn_2", ItemID: "item_2",
}

// attachPayload is a run.attach payload handing the runner to next over connection.
func attachPayload(next Identity, connection map[string]any) json.RawMessage {
	return jsonenc.MustMarshal(map[string]any{
		"provider":               map[string]any{"kind": "acpx", "agent": "fake"},
		"paperclipNextAuthority": map[string]any{"identity": next, "connection": connection},
	})
}

// warmRig is one side of a rotation test: how the core reaches the runner
// before and after the rotation.
type warmRig struct {
	core       *Core
	client     *Client
	u          *runnerUser
	done       <-chan error
	connection map[string]any
	// rotate points the runner at the new run (a new dialer, or the listener's new path).
	rotate func(t *testing.T, r WarmTransition)
	// reach makes the core connect to the runner where the mode needs it.
	reach func(t *testing.T, ctx context.Context)
}

func dialRig(t *testing.T, ctx context.Context) *warmRig {
	core := newTestCore(nil)
	t.Cleanup(core.Close)
	srv := httptest.NewServer(core)
	t.Cleanup(srv.Close)
	base := "ws://" + strings.TrimPrefix(srv.URL, "http://")
	d, err := NewDialer(ctx, DialerConfig{URL: base + ConnectPath(runnerIdentity.RunID)})
	require.NoError(t, err)
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := ClientConfig{Dialer: d, Ticket: ticket}
	u.hooks(&cfg)
	client, done := startClient(t, ctx, cfg)
	u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	newURL := base + ConnectPath(nextIdentity.RunID)
	return &warmRig{
		core: core, client: client, u: u, done: done,
		connection: map[string]any{"mode": "connect", "connectUrl": newURL},
		rotate: func(t *testing.T, r WarmTransition) {
			nd, err := NewDialer(ctx, DialerConfig{URL: newURL})
			require.NoError(t, err)
			require.NoError(t, client.BeginWarmActivation(r, nd))
		},
		reach: func(*testing.T, context.Context) {},
	}
}

func listenRig(t *testing.T, ctx context.Context) *warmRig {
	ln, err := Listen(ListenConfig{Address: "127.0.0.1", Port: 0, Path: ConnectPath(runnerIdentity.RunID)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	core := newTestCore(nil)
	t.Cleanup(core.Close)
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := ClientConfig{Listener: ln, Ticket: ticket}
	u.hooks(&cfg)
	client, done := startClient(t, ctx, cfg)
	require.NoError(t, core.Connect(ctx, "ws://"+ln.Addr().String()+ln.Path()))
	u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	addr := ln.Addr().String()
	host, portText, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	portNum, err := strconv.Atoi(portText)
	require.NoError(t, err)
	newPath := ConnectPath(nextIdentity.RunID)
	return &warmRig{
		core: core, client: client, u: u, done: done,
		connection: map[string]any{"mode": "listen", "listenAddress": host, "listenPort": portNum, "listenPath": newPath},
		rotate: func(t *testing.T, r WarmTransition) {
			require.NoError(t, ln.SetPath(newPath)) // same socket, new path (prp.md §1.2)
			require.NoError(t, client.BeginWarmActivation(r, nil))
		},
		reach: func(t *testing.T, ctx context.Context) {
			require.NoError(t, core.Connect(ctx, "ws://"+addr+newPath))
		},
	}
}

// lastControl returns the newest control of kind, if any; u.mu held.
func lastControl(u *runnerUser, kind string) *Envelope {
	for i := len(u.controls) - 1; i >= 0; i-- {
		if u.controls[i].Kind == kind {
			return u.controls[i]
		}
	}
	return nil
}

// TestPRP24_WarmAttachCoreHalf ports prp.md §15 scenario 24 for the core
// half, in dial and listen mode over loopback sockets: the old outbox is
// committed, the run.attach result is acknowledged with the receipt both
// peers compute, the runner reconnects as the new run with the same lease
// and warmTransitionId (listen mode: same socket, rotated path), the
// welcome carries the exact receipt with phase "activated", and
// warm_transition_activated is acknowledged. The new identity then has its
// own journal and event sequence. An inexact receipt is refused and the
// exact one still activates.
func TestPRP24_WarmAttachCoreHalf(t *testing.T) {
	for name, rig := range map[string]func(*testing.T, context.Context) *warmRig{"dial": dialRig, "listen": listenRig} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r := rig(t, ctx)
			core, client, u := r.core, r.client, r.u

			// The old outbox is committed first.
			require.NoError(t, client.Send(ctx, eventEnvelope(t, 1)))
			require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.AckedSourceSeq == 1 }))

			queued, err := core.QueueCommand(Command{Type: CommandRunAttach, Payload: attachPayload(nextIdentity, r.connection)})
			require.NoError(t, err)
			u.waitFor(ctx, t, "run.attach", func(u *runnerUser) bool { return lastControl(u, KindCommand) != nil })
			u.mu.Lock()
			cmdEnv := lastControl(u, KindCommand)
			u.mu.Unlock()
			cmd, err := DecodeCommand(cmdEnv.Payload)
			require.NoError(t, err)
			require.Equal(t, queued.CommandID, cmd.CommandID)

			result := jsonenc.MustMarshal(CommandResultPayload{CommandID: cmd.CommandID, ControllerSeq: cmd.ControllerSeq,
				CommandType: cmd.Type, Status: "completed", Result: json.RawMessage(`{"attached":true}`)})
			lease, ok := client.Lease()
			require.True(t, ok)
			want, err := NewWarmTransition(WarmTransitionInput{Old: runnerIdentity, Command: cmd, Result: result,
				OldAckedSourceSeq: 1, RunnerVersion: runnerVer, RunnerDigest: runnerDig, Lease: lease})
			require.NoError(t, err)

			// Queued behind the run.attach: never delivered to the old run, it
			// moves to the new run's journal.
			behind, err := core.QueueCommand(Command{Type: "session.snapshot", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)

			b, err := MarshalEnvelope(NewEventEnvelope(KindCommandResult, cmdEnv.Version, runnerIdentity, result))
			require.NoError(t, err)
			require.NoError(t, client.Send(ctx, b))
			u.waitFor(ctx, t, "command_result_ack", func(u *runnerUser) bool { return lastControl(u, KindCommandResultAck) != nil })
			u.mu.Lock()
			var ack CommandResultAckPayload
			require.NoError(t, lastControl(u, KindCommandResultAck).DecodePayload(&ack))
			u.mu.Unlock()
			require.True(t, SameWarmTransition(ack.WarmTransition, want), "both peers compute the same receipt")
			got, err := DecodeWarmTransition(ack.WarmTransition)
			require.NoError(t, err)
			require.Equal(t, want.TransitionID, got.TransitionID)
			require.Equal(t, WarmTransitionSchema, got.Schema)
			// Queued inside the transition: it belongs to the new run and waits.
			later, err := core.QueueCommand(Command{Type: "session.snapshot", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			require.EqualValues(t, 2, later.ControllerSeq, "the new identity's journal: the moved command, then this one")
			require.NotEqual(t, behind.CommandID, later.CommandID, "a commandId names one command across epochs")
			snap := core.Snapshot()
			require.NotNil(t, snap.Warm)
			require.Equal(t, runnerIdentity, snap.Identity)

			// An inexact receipt (same id, one field changed) is refused in
			// the welcome; the runner keeps trying and no welcome is adopted.
			bad := want
			bad.LeaseExpiresAtUnixMs++
			authsBefore := core.Snapshot().Authentications
			r.rotate(t, bad)
			r.reach(t, ctx)
			require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.Authentications > authsBefore }))
			u.mu.Lock()
			require.Len(t, u.welcomes, 1, "a welcome with another receipt is refused")
			u.mu.Unlock()

			// The exact receipt activates.
			r.rotate(t, want)
			r.reach(t, ctx)
			u.waitFor(ctx, t, "activated welcome", func(u *runnerUser) bool { return len(u.welcomes) == 2 })
			u.mu.Lock()
			w, conn := u.welcomes[1], u.conns[1]
			u.mu.Unlock()
			require.Equal(t, WarmPhaseActivated, w.WarmTransitionPhase)
			require.True(t, SameWarmTransition(w.WarmTransition, want))
			require.Equal(t, lease.ID, w.Lease.ID, "same lease across the rotation")
			require.Empty(t, w.PendingCommands, "nothing is delivered before activation")
			require.Equal(t, nextIdentity, conn.Session().Identity)

			require.NoError(t, conn.SendControl(ctx, KindWarmTransitionActivated, WarmTransitionActivatedPayload{TransitionID: want.TransitionID}))
			u.waitFor(ctx, t, "activation ack", func(u *runnerUser) bool { return lastControl(u, KindWarmTransitionActivatedAck) != nil })
			client.EndWarmActivation()
			snap = core.Snapshot()
			require.Nil(t, snap.Warm)
			require.Equal(t, nextIdentity, snap.Identity)
			require.Len(t, snap.Epochs, 1)
			require.Equal(t, runnerIdentity, snap.Epochs[0].Identity)
			require.Len(t, snap.Epochs[0].Events, 1)
			require.EqualValues(t, 0, snap.AckedSourceSeq)

			// The command queued inside the transition follows the ack, under
			// the new identity; the new run's events start at sourceSeq 1.
			u.waitFor(ctx, t, "next command", func(u *runnerUser) bool {
				e := lastControl(u, KindCommand)
				return e != nil && e.RunID == nextIdentity.RunID
			})
			u.mu.Lock()
			next, err := DecodeCommand(lastControl(u, KindCommand).Payload)
			u.mu.Unlock()
			require.NoError(t, err)
			require.Equal(t, behind.CommandID, next.CommandID)
			require.EqualValues(t, 1, next.ControllerSeq, "the new journal starts at 1")
			payload := fmt.Appendf(nil, `{"schema":"paperclip.prp.event.v1","sourceEventId":"event_runner_1_%016d","sourceSeq":1,"sourceInstanceId":"runner_1","sourceKind":"runner","eventType":"runner.diagnostic","schemaVersion":1,"priority":1,"payload":{}}`, 1)
			ev, err := MarshalEnvelope(NewEventEnvelope(KindEvent, ProtocolVersion, nextIdentity, payload))
			require.NoError(t, err)
			require.NoError(t, conn.Send(ctx, ev))
			require.NoError(t, core.Wait(ctx, func(s CoreSnapshot) bool { return s.AckedSourceSeq == 1 && len(s.Events) == 1 }))

			cancel()
			<-r.done
		})
	}
}

// warmNodeScript rebuilds a receipt the way CP warmTransitionReceipt
// describes it (body fields, commandFingerprint over the wire command with
// deadlineAt/precondition null, transitionId over the body), with an
// independent canonical JSON (sorted keys, JSON.stringify leaves).
const warmNodeScript = `
const crypto = require("crypto");
const canon = (v) => Array.isArray(v) ? "[" + v.map(canon).join(",") + "]"
  : (v !== null && typeof v === "object") ? "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canon(v[k])).join(",") + "}"
  : JSON.stringify(v);
const digest = (v) => crypto.createHash("sha256").update(canon(v)).digest("hex");
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const { command, result, identity, acked, lease, runnerVersion, runnerDigest } = input;
const boundary = command.payload.paperclipNextAuthority;
const { status: _s, result: _r, ...wire } = command;
const body = {
  schema: "paperclip.runner.warm-transition.v1",
  oldIdentity: identity, newIdentity: boundary.identity,
  commandId: command.commandId, controllerSeq: command.controllerSeq,
  commandFingerprint: digest({ ...wire, deadlineAt: null, precondition: null }),
  resultDigest: digest(result), oldAckedSourceSeq: acked, connection: boundary.connection,
  runnerVersion, runnerDigest, leaseId: lease.id, leaseExpiresAtUnixMs: lease.expiresAtUnixMs,
  leaseRevocationEpoch: lease.revocationEpoch,
};
process.stdout.write(canon({ ...body, transitionId: digest(body) }));
`

// TestWarmTransitionMatchesNode cross-checks NewWarmTransition against an
// independent Node implementation of the CP receipt, with characters Go
// would HTML-escape in a string.
func TestWarmTransitionMatchesNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	payload := attachPayload(nextIdentity, map[string]any{"mode": "connect", "connectUrl": "ws://127.0.0.1:9/api/runner/v1/connect/run_2", "note": "<&>"})
	raw := jsonenc.MustMarshal(map[string]any{"schema": "paperclip.prp.command.v1", "commandId": "command_prp_00000007",
		"controllerSeq": 7, "type": CommandRunAttach, "issuedAt": "2026-12-01T00:00:00.000Z", "payload": payload})
	cmd, err := DecodeCommand(raw)
	require.NoError(t, err)
	result := jsonenc.MustMarshal(CommandResultPayload{CommandID: cmd.CommandID, ControllerSeq: 7, CommandType: CommandRunAttach,
		Status: "completed", Result: json.RawMessage(`{"attached":true,"text":"a<b>&c"}`)})
	lease := Lease{ID: "connection_lease_1", ExpiresAtUnixMs: 4070908800000, RevocationEpoch: 3}
	r, err := NewWarmTransition(WarmTransitionInput{Old: runnerIdentity, Command: cmd, Result: result, OldAckedSourceSeq: 12,
		RunnerVersion: runnerVer, RunnerDigest: runnerDig, Lease: lease})
	require.NoError(t, err)

	in := jsonenc.MustMarshal(map[string]any{"command": json.RawMessage(raw), "result": json.RawMessage(result),
		"identity": runnerIdentity, "acked": 12, "runnerVersion": runnerVer, "runnerDigest": runnerDig,
		"lease": map[string]any{"id": lease.ID, "expiresAtUnixMs": lease.ExpiresAtUnixMs, "revocationEpoch": lease.RevocationEpoch}})
	c := exec.Command(node, "-e", warmNodeScript)
	c.Stdin = bytes.NewReader(in)
	out, err := c.Output()
	require.NoError(t, err)
	want, err := Canonical(r.Marshal())
	require.NoError(t, err)
	require.Equal(t, string(out), string(want))
	got, err := DecodeWarmTransition(out)
	require.NoError(t, err)
	require.Equal(t, r.TransitionID, got.TransitionID)
}

// FuzzDecodeWarmTransition: the receipt decoder never panics, and what it
// accepts re-encodes to the same canonical receipt with a valid digest.
func FuzzDecodeWarmTransition(f *testing.F) {
	cmd, _ := DecodeCommand(jsonenc.MustMarshal(map[string]any{"schema": "paperclip.prp.command.v1", "commandId": "c1",
		"controllerSeq": 1, "type": CommandRunAttach, "issuedAt": "2026-12-01T00:00:00.000Z",
		"payload": attachPayload(nextIdentity, map[string]any{"mode": "connect", "connectUrl": "ws://127.0.0.1:9/x"})}))
	r, err := NewWarmTransition(WarmTransitionInput{Old: runnerIdentity, Command: cmd,
		Result:        jsonenc.MustMarshal(CommandResultPayload{CommandID: "c1", ControllerSeq: 1, CommandType: CommandRunAttach, Status: "completed", Result: json.RawMessage(`{}`)}),
		RunnerVersion: runnerVer, RunnerDigest: runnerDig, Lease: Lease{ID: "l1", ExpiresAtUnixMs: 1}})
	require.NoError(f, err)
	f.Add([]byte(r.Marshal()))
	f.Add([]byte(`{"schema":"paperclip.runner.warm-transition.v1"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := DecodeWarmTransition(b)
		if err != nil {
			return
		}
		d, err := w.digest()
		require.NoError(t, err)
		require.Equal(t, w.TransitionID, d)
		require.True(t, SameWarmTransition(b, w))
	})
}

// FuzzParseNextAuthority: the paperclipNextAuthority parser never panics
// and accepts only an exact identity and a connection of a known mode.
func FuzzParseNextAuthority(f *testing.F) {
	f.Add([]byte(attachPayload(nextIdentity, map[string]any{"mode": "listen", "listenAddress": "0.0.0.0", "listenPort": 43127, "listenPath": "/api/runner/v1/connect/run_2"})))
	f.Add([]byte(`{"paperclipNextAuthority":{"identity":{},"connection":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, c, err := ParseNextAuthority(b)
		if err != nil {
			return
		}
		require.Contains(t, []string{"connect", "listen"}, c.Mode)
		_, err = exactIdentity(jsonenc.MustMarshal(n.Identity))
		require.NoError(t, err)
	})
}

// TestWarmTransitionRefusals: the receipt builder refuses a binding CP refuses.
func TestWarmTransitionRefusals(t *testing.T) {
	mk := func(next Identity, status string) error {
		cmd, err := DecodeCommand(jsonenc.MustMarshal(map[string]any{"schema": "paperclip.prp.command.v1", "commandId": "c1",
			"controllerSeq": 1, "type": CommandRunAttach, "issuedAt": "2026-12-01T00:00:00.000Z",
			"payload": attachPayload(next, map[string]any{"mode": "connect", "connectUrl": "ws://127.0.0.1:9/x"})}))
		require.NoError(t, err)
		_, err = NewWarmTransition(WarmTransitionInput{Old: runnerIdentity, Command: cmd,
			Result:        jsonenc.MustMarshal(CommandResultPayload{CommandID: "c1", ControllerSeq: 1, CommandType: CommandRunAttach, Status: status, Result: json.RawMessage(`{}`)}),
			RunnerVersion: runnerVer, RunnerDigest: runnerDig, Lease: Lease{ID: "l1", ExpiresAtUnixMs: 1}})
		return err
	}
	require.NoError(t, mk(nextIdentity, "completed"))
	require.ErrorIs(t, mk(nextIdentity, "failed"), ErrWarmTransition)
	same := nextIdentity
	same.RunID = runnerIdentity.RunID
	require.ErrorIs(t, mk(same, "completed"), ErrWarmTransition, "runId must change")
	moved := nextIdentity
	moved.NormalizedSessionID = "other"
	require.ErrorIs(t, mk(moved, "completed"), ErrWarmTransition, "normalizedSessionId is immutable")
}

// TestStableIDAndDigestMatchCPPatterns: the loops accept exactly what CP's
// patterns accept.
func TestStableIDAndDigestMatchCPPatterns(t *testing.T) {
	stable := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,239}$`)
	digest := regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	cases := []string{"", "a", "A.b_c:d-e", ".a", "-a", "a b", "a/b", "é", strings.Repeat("a", 240), strings.Repeat("a", 241),
		"sha256:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("F", 64), "sha256:" + strings.Repeat("a", 63), "sha256:" + strings.Repeat("a", 65), "sha1:00"}
	for _, c := range cases {
		require.Equal(t, stable.MatchString(c), isStableID(c), "stable id %q", c)
		require.Equal(t, digest.MatchString(c), isRunnerDigest(c), "digest %q", c)
	}
}

func FuzzStableID(f *testing.F) {
	stable := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,239}$`)
	digest := regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	f.Add("run_1")
	f.Add("sha256:" + strings.Repeat("0", 64))
	f.Fuzz(func(t *testing.T, s string) {
		if stable.MatchString(s) != isStableID(s) || digest.MatchString(s) != isRunnerDigest(s) {
			t.Fatalf("pattern and loop disagree on %q", s)
		}
	})
}
