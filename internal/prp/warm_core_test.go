package prp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

var nextIdentity = prp.Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_1", RunID: "run_2",
	NormalizedSessionID: "session_1", TurnID: "turn_2", ItemID: "item_2",
}

// attachPayload is a run.attach payload handing the runner to next over connection.
func attachPayload(next prp.Identity, connection map[string]any) json.RawMessage {
	return jsonenc.MustMarshal(map[string]any{
		"provider":               map[string]any{"kind": "acpx", "agent": "fake"},
		"paperclipNextAuthority": map[string]any{"identity": next, "connection": connection},
	})
}

// warmRig is one side of a rotation test: how the core reaches the runner
// before and after the rotation.
type warmRig struct {
	core       *control.Core
	client     *prp.Client
	u          *runnerUser
	done       <-chan error
	connection map[string]any
	// rotate points the runner at the new run (a new dialer, or the listener's new path).
	rotate func(t *testing.T, r prp.WarmTransition)
	// reach makes the core connect to the runner where the mode needs it.
	reach func(t *testing.T, ctx context.Context)
}

func dialRig(t *testing.T, ctx context.Context) *warmRig {
	core := newTestCore(nil)
	t.Cleanup(core.Close)
	srv := httptest.NewServer(core)
	t.Cleanup(srv.Close)
	base := "ws://" + strings.TrimPrefix(srv.URL, "http://")
	d, err := prp.NewDialer(ctx, prp.DialerConfig{URL: base + prp.ConnectPath(runnerIdentity.RunID)})
	require.NoError(t, err)
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := prp.ClientConfig{Dialer: d, Ticket: ticket}
	u.hooks(&cfg)
	client, done := startClient(t, ctx, cfg)
	u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	newURL := base + prp.ConnectPath(nextIdentity.RunID)
	return &warmRig{
		core: core, client: client, u: u, done: done,
		connection: map[string]any{"mode": "connect", "connectUrl": newURL},
		rotate: func(t *testing.T, r prp.WarmTransition) {
			nd, err := prp.NewDialer(ctx, prp.DialerConfig{URL: newURL})
			require.NoError(t, err)
			require.NoError(t, client.BeginWarmActivation(r, nd))
		},
		reach: func(*testing.T, context.Context) {},
	}
}

func listenRig(t *testing.T, ctx context.Context) *warmRig {
	ln, err := prp.Listen(prp.ListenConfig{Address: "127.0.0.1", Port: 0, Path: prp.ConnectPath(runnerIdentity.RunID)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	core := newTestCore(nil)
	t.Cleanup(core.Close)
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := prp.ClientConfig{Listener: ln, Ticket: ticket}
	u.hooks(&cfg)
	client, done := startClient(t, ctx, cfg)
	require.NoError(t, core.Connect(ctx, "ws://"+ln.Addr().String()+ln.Path()))
	u.waitFor(ctx, t, "welcome", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	addr := ln.Addr().String()
	host, portText, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	portNum, err := strconv.Atoi(portText)
	require.NoError(t, err)
	newPath := prp.ConnectPath(nextIdentity.RunID)
	return &warmRig{
		core: core, client: client, u: u, done: done,
		connection: map[string]any{"mode": "listen", "listenAddress": host, "listenPort": portNum, "listenPath": newPath},
		rotate: func(t *testing.T, r prp.WarmTransition) {
			require.NoError(t, ln.SetPath(newPath)) // same socket, new path (prp.md §1.2)
			require.NoError(t, client.BeginWarmActivation(r, nil))
		},
		reach: func(t *testing.T, ctx context.Context) {
			require.NoError(t, core.Connect(ctx, "ws://"+addr+newPath))
		},
	}
}

// lastControl returns the newest control of kind, if any; u.mu held.
func lastControl(u *runnerUser, kind string) *prp.Envelope {
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
			require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.AckedSourceSeq == 1 }))

			queued, err := core.QueueCommand(prp.Command{Type: prp.CommandRunAttach, Payload: attachPayload(nextIdentity, r.connection)})
			require.NoError(t, err)
			u.waitFor(ctx, t, "run.attach", func(u *runnerUser) bool { return lastControl(u, prp.KindCommand) != nil })
			u.mu.Lock()
			cmdEnv := lastControl(u, prp.KindCommand)
			u.mu.Unlock()
			cmd, err := prp.DecodeCommand(cmdEnv.Payload)
			require.NoError(t, err)
			require.Equal(t, queued.CommandID, cmd.CommandID)

			result := jsonenc.MustMarshal(prp.CommandResultPayload{CommandID: cmd.CommandID, ControllerSeq: cmd.ControllerSeq,
				CommandType: cmd.Type, Status: "completed", Result: json.RawMessage(`{"attached":true}`)})
			lease, ok := client.Lease()
			require.True(t, ok)
			want, err := prp.NewWarmTransition(prp.WarmTransitionInput{Old: runnerIdentity, Command: cmd, Result: result,
				OldAckedSourceSeq: 1, RunnerVersion: runnerVer, RunnerDigest: runnerDig, Lease: lease})
			require.NoError(t, err)

			// Queued behind the run.attach: never delivered to the old run, it
			// moves to the new run's journal.
			behind, err := core.QueueCommand(prp.Command{Type: "session.snapshot", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)

			b, err := prp.MarshalEnvelope(prp.NewEventEnvelope(prp.KindCommandResult, cmdEnv.Version, runnerIdentity, result))
			require.NoError(t, err)
			require.NoError(t, client.Send(ctx, b))
			u.waitFor(ctx, t, "command_result_ack", func(u *runnerUser) bool { return lastControl(u, prp.KindCommandResultAck) != nil })
			u.mu.Lock()
			var ack prp.CommandResultAckPayload
			require.NoError(t, lastControl(u, prp.KindCommandResultAck).DecodePayload(&ack))
			u.mu.Unlock()
			require.True(t, prp.SameWarmTransition(ack.WarmTransition, want), "both peers compute the same receipt")
			got, err := prp.DecodeWarmTransition(ack.WarmTransition)
			require.NoError(t, err)
			require.Equal(t, want.TransitionID, got.TransitionID)
			require.Equal(t, prp.WarmTransitionSchema, got.Schema)
			// Queued inside the transition: it belongs to the new run and waits.
			later, err := core.QueueCommand(prp.Command{Type: "session.snapshot", Payload: json.RawMessage(`{}`)})
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
			require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.Authentications > authsBefore }))
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
			require.Equal(t, prp.WarmPhaseActivated, w.WarmTransitionPhase)
			require.True(t, prp.SameWarmTransition(w.WarmTransition, want))
			require.Equal(t, lease.ID, w.Lease.ID, "same lease across the rotation")
			require.Empty(t, w.PendingCommands, "nothing is delivered before activation")
			require.Equal(t, nextIdentity, conn.Session().Identity)

			require.NoError(t, conn.SendControl(ctx, prp.KindWarmTransitionActivated, prp.WarmTransitionActivatedPayload{TransitionID: want.TransitionID}))
			u.waitFor(ctx, t, "activation ack", func(u *runnerUser) bool { return lastControl(u, prp.KindWarmTransitionActivatedAck) != nil })
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
				e := lastControl(u, prp.KindCommand)
				return e != nil && e.RunID == nextIdentity.RunID
			})
			u.mu.Lock()
			next, err := prp.DecodeCommand(lastControl(u, prp.KindCommand).Payload)
			u.mu.Unlock()
			require.NoError(t, err)
			require.Equal(t, behind.CommandID, next.CommandID)
			require.EqualValues(t, 1, next.ControllerSeq, "the new journal starts at 1")
			payload := fmt.Appendf(nil, `{"schema":"paperclip.prp.event.v1","sourceEventId":"event_runner_1_%016d","sourceSeq":1,"sourceInstanceId":"runner_1","sourceKind":"runner","eventType":"runner.diagnostic","schemaVersion":1,"priority":1,"payload":{}}`, 1)
			ev, err := prp.MarshalEnvelope(prp.NewEventEnvelope(prp.KindEvent, prp.ProtocolVersion, nextIdentity, payload))
			require.NoError(t, err)
			require.NoError(t, conn.Send(ctx, ev))
			require.NoError(t, core.Wait(ctx, func(s control.Snapshot) bool { return s.AckedSourceSeq == 1 && len(s.Events) == 1 }))

			cancel()
			<-r.done
		})
	}
}
