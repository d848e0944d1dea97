package prp

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

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
