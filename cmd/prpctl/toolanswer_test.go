package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// testWait bounds each wait on the answerer (a safety net only).
const testWait = 10 * time.Second

// TestToolCommandID: tools.md §3 item 4's formula; the vector was computed
// outside Go (python3 hashlib.sha256(b"run_local\x00call_0001")).
func TestToolCommandID(t *testing.T) {
	require.Equal(t, "command_tool_4ce96743a0b47994283e469a77df4b12", toolCommandID("run_local", "call_0001"))
}

// fakeCore is the answerer's view of a core: committed events in, queued
// commands out.
type fakeCore struct {
	mu      sync.Mutex
	changed chan struct{}
	events  []json.RawMessage
	queued  []prp.Command
}

func newFakeCore() *fakeCore { return &fakeCore{changed: make(chan struct{})} }

func (f *fakeCore) Wait(ctx context.Context, cond func(control.Snapshot) bool) error {
	for {
		f.mu.Lock()
		ok := cond(control.Snapshot{Events: f.events[:len(f.events):len(f.events)]})
		ch := f.changed
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (f *fakeCore) QueueCommand(cmd prp.Command) (prp.Command, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued = append(f.queued, cmd)
	close(f.changed)
	f.changed = make(chan struct{})
	return cmd, nil
}

func (f *fakeCore) commit(env string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, json.RawMessage(env))
	close(f.changed)
	f.changed = make(chan struct{})
}

// waitQueued waits until n commands are queued.
func (f *fakeCore) waitQueued(t *testing.T, n int) []prp.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	var out []prp.Command
	require.NoError(t, f.Wait(ctx, func(control.Snapshot) bool {
		out = append([]prp.Command(nil), f.queued...)
		return len(out) >= n
	}))
	return out
}

const testCorrelation = `{"runId":"run_local","normalizedSessionId":"session_local","turnId":"turn_local","itemId":"item_local"}`

func toolInputEvent(eventID, op, callID string) string {
	return `{"kind":"event","version":2,"payload":{"schema":"paperclip.prp.event.v2","sourceEventId":"` + eventID +
		`","runId":"run_local","eventType":"semantic_tool.input","payload":{"semantic_tool":{"schema":"paperclip.prp.semantic_tool.v1",` +
		`"schemaVersion":1,"phase":"input","operationId":"` + op + `","callId":"` + callID + `","correlation":` + testCorrelation +
		`,"idempotencyKey":null,"content":{"digest":"sha256:` + strings.Repeat("ab", 32) + `","redactionDisposition":"digest_only","references":[]},"input":{"a":1}}}}}`
}

// TestToolAnswererAnswersEachInputOnce: every semantic_tool.input gets one
// semantic_tool.result command with the §3 item 4 payload and command id;
// a re-seen event is not answered again; other events are ignored; a
// toolErrors entry answers one call, then the standing result does; the
// reserved tools are accepted by default; an operation without a result
// gets a tool error.
func TestToolAnswererAnswersEachInputOnce(t *testing.T) {
	core := newFakeCore()
	a := newToolAnswerer()
	a.set(map[string]json.RawMessage{"issue.comment": json.RawMessage(`{"ok":true,"result":{"id":7}}`)},
		map[string]json.RawMessage{"issue.comment": json.RawMessage(`{"success":false,"contentItems":[{"type":"inputText","text":"no"}]}`)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.run(ctx, core, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() { cancel(); <-done }()

	core.commit(`{"kind":"event","payload":{"eventType":"item.delta","payload":{}}}`)
	core.commit(toolInputEvent("evt_1", "issue.comment", "call_0001"))
	core.commit(toolInputEvent("evt_1", "issue.comment", "call_0001")) // seen again: no second answer
	core.commit(toolInputEvent("evt_2", "issue.comment", "call_0002"))
	core.commit(toolInputEvent("evt_3", "paperclip_finish", "call_0003"))
	core.commit(toolInputEvent("evt_4", "other.op", "call_0004"))
	cmds := core.waitQueued(t, 4)
	require.Len(t, cmds, 4)

	want := []struct {
		callID, eventID, op, result string
		isError                     bool
	}{
		{"call_0001", "evt_1", "issue.comment", `{"success":false,"contentItems":[{"type":"inputText","text":"no"}]}`, true},
		{"call_0002", "evt_2", "issue.comment", `{"ok":true,"result":{"id":7}}`, false},
		{"call_0003", "evt_3", "paperclip_finish", acceptedResult, false},
		{"call_0004", "evt_4", "other.op", `{"success":false,"contentItems":[{"type":"inputText","text":"` + missingResultText + `"}]}`, true},
	}
	for i, w := range want {
		require.Equal(t, "semantic_tool.result", cmds[i].Type)
		require.Equal(t, toolCommandID("run_local", w.callID), cmds[i].CommandID)
		require.JSONEq(t, `{"callId":"`+w.callID+`","operationId":"`+w.op+`","inputDigest":"sha256:`+strings.Repeat("ab", 32)+
			`","sourceEventId":"`+w.eventID+`","sourceEventType":"semantic_tool.input","correlation":`+testCorrelation+
			`,"result":`+w.result+`,"isError":`+map[bool]string{true: "true", false: "false"}[w.isError]+`}`, string(cmds[i].Payload))
	}
	require.Equal(t, []string{cmds[0].CommandID, cmds[1].CommandID, cmds[2].CommandID, cmds[3].CommandID}, a.commandIDs())
}

func TestParseToolResultFlag(t *testing.T) {
	op, r, err := parseToolResultFlag(`issue.comment={"a":"b=c"}`)
	require.NoError(t, err)
	require.Equal(t, "issue.comment", op)
	require.JSONEq(t, `{"a":"b=c"}`, string(r))
	for _, bad := range []string{"", "x", "=1", "x={", "x="} {
		_, _, err := parseToolResultFlag(bad)
		require.ErrorIs(t, err, errScript, bad)
	}
}

// FuzzToolAnswerer feeds arbitrary event envelopes: an answer, when there
// is one, is a semantic_tool.result with a valid JSON object payload.
func FuzzToolAnswerer(f *testing.F) {
	f.Add(toolInputEvent("e", "op", "c"))
	f.Add(`{"payload":{"eventType":"semantic_tool.input","payload":{"semantic_tool":{"callId":"c","operationId":"o"}}}}`)
	f.Add(`{"payload":{"eventType":"semantic_tool.input","runId":"r","payload":{"semantic_tool":{"callId":"c","operationId":"o","correlation":7}}}}`)
	f.Fuzz(func(t *testing.T, env string) {
		cmd, ok := newToolAnswerer().commandFor(json.RawMessage(env))
		if !ok {
			return
		}
		if cmd.Type != prp.CommandSemanticToolResult || !isObject(cmd.Payload) || !strings.HasPrefix(cmd.CommandID, "command_tool_") {
			t.Fatalf("bad answer %+v", cmd)
		}
	})
}

// TestOpenRequestAndResolvePayload: resolve picks the latest request that
// no later event settled and this script did not answer, and names the
// agent option of the wanted kind.
func TestOpenRequestAndResolvePayload(t *testing.T) {
	created := func(id string) json.RawMessage {
		return json.RawMessage(`{"payload":{"eventType":"runtime_request.created","turnId":"turn_local","payload":{"request":{"requestId":"` + id +
			`","choices":[{"key":"allow","kind":"allow_once"},{"key":"allow-always","kind":"allow_always"},{"key":"reject","kind":"reject_once"}]}}}}`)
	}
	resolvedEv := json.RawMessage(`{"payload":{"eventType":"runtime_request.resolved","payload":{"requestId":"r2"}}}`)
	s := control.Snapshot{Events: []json.RawMessage{created("r1"), created("r2"), resolvedEv, created("r3")}}
	req, ok := openRequest(s, map[string]bool{})
	require.True(t, ok)
	require.Equal(t, "r3", req.Payload.Request.RequestID)
	req, ok = openRequest(s, map[string]bool{"r3": true})
	require.True(t, ok)
	require.Equal(t, "r1", req.Payload.Request.RequestID, "r2 was settled")
	_, ok = openRequest(s, map[string]bool{"r3": true, "r1": true})
	require.False(t, ok)

	for word, want := range map[string]string{
		"allow":        `{"requestId":"r3","turnId":"turn_local","resolution":{"action":"accept"},"response":{"optionId":"allow"}}`,
		"allow_always": `{"requestId":"r3","turnId":"turn_local","resolution":{"action":"accept_for_session"},"response":{"optionId":"allow-always"}}`,
		"reject":       `{"requestId":"r3","turnId":"turn_local","resolution":{"action":"decline"},"response":{"optionId":"reject"}}`,
		"cancel":       `{"requestId":"r3","turnId":"turn_local","resolution":{"action":"cancel"},"response":{"outcome":"cancelled"}}`,
	} {
		req, _ := openRequest(s, map[string]bool{})
		require.JSONEq(t, want, string(resolvePayload(req, resolveAction(word))), word)
	}
	// tools.md §7 choices carry the action as key and no kind.
	v1 := json.RawMessage(`{"payload":{"eventType":"runtime_request.created","payload":{"request":{"requestId":"q","turnId":"t9","choices":[{"key":"accept"},{"key":"decline"}]}}}}`)
	req, ok = openRequest(control.Snapshot{Events: []json.RawMessage{v1}}, nil)
	require.True(t, ok)
	require.JSONEq(t, `{"requestId":"q","turnId":"t9","resolution":{"action":"decline"},"response":{"optionId":"decline"}}`,
		string(resolvePayload(req, "decline")))
	require.JSONEq(t, `{"requestId":"q","turnId":"t9","resolution":{"action":"accept_for_session"}}`,
		string(resolvePayload(req, "accept_for_session")), "no such choice: the resolution alone")
}

func TestCountEventsAcrossEpochs(t *testing.T) {
	ev := json.RawMessage(`{"payload":{"eventType":"run.terminal"}}`)
	other := json.RawMessage(`{"payload":{"eventType":"item.delta"}}`)
	s := control.Snapshot{Events: []json.RawMessage{ev, other}, Epochs: []control.Epoch{{Events: []json.RawMessage{ev}}}}
	require.Equal(t, 2, countEvents(s, "run.terminal"))
	require.Equal(t, 0, countEvents(s, "nope"))
}
