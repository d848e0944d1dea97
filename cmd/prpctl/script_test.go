package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseScript(t *testing.T) {
	steps, err := parseScript(strings.NewReader(`
# a comment
{"command":"session.snapshot"}
{"command":"turn.start","payload":{"text":"hi"}}
{"sleepMs":5}
{"ping":true}
{"wait":true}
{"drop":true}
{"revoke":2}
`))
	require.NoError(t, err)
	require.Len(t, steps, 7)
	require.JSONEq(t, `{}`, string(steps[0].Payload))
	require.Equal(t, "turn.start", steps[1].Command)
	require.EqualValues(t, 2, steps[6].Revoke)

	for _, bad := range []string{
		`{"command":"a","sleepMs":1}`, // two actions
		`{}`,                          // none
		`{"payload":{}}`,              // payload without command
		`{"command":"a","payload":[1]}`,
		`{"command":"zzqq yy"}`,
		`{"sleepMs":-1}`,
		`{"revoke":-3}`,
		`{"bogus":1}`,
		`{"ping":true} {"ping":true}`,
		`not json`,
	} {
		_, err := parseScript(strings.NewReader(bad))
		require.Error(t, err, bad)
		require.True(t, errors.Is(err, errScript), bad)
		require.NotContains(t, err.Error(), "zzqq", "errors never echo script content")
	}
}

func TestParseCommandFlag(t *testing.T) {
	s, err := parseCommandFlag(`turn.start={"text":"a=b"}`)
	require.NoError(t, err)
	require.Equal(t, "turn.start", s.Command)
	require.JSONEq(t, `{"text":"a=b"}`, string(s.Payload))
	_, err = parseCommandFlag(`turn.start=[]`)
	require.Error(t, err)
	_, err = parseCommandFlag(``)
	require.Error(t, err)
}

func FuzzParseScript(f *testing.F) {
	f.Add(`{"command":"session.snapshot","payload":{}}`)
	f.Add("{\"sleepMs\":1}\n{\"wait\":true}\n# c\n")
	f.Add(`{"revoke":1}`)
	f.Add(`{"command":"x","payload":{"a":[1,2,{"b":null}]}}`)
	f.Fuzz(func(t *testing.T, in string) {
		steps, err := parseScript(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, s := range steps {
			if s.Command != "" && !isObject(s.Payload) {
				t.Fatalf("accepted a command without an object payload")
			}
		}
	})
}

// TestParseAttachStep: an attach step becomes a run.attach command whose
// payload is the provider seed plus paperclipNextAuthority; a malformed
// identity or connection is refused before anything is queued.
func TestParseAttachStep(t *testing.T) {
	const id = `{"runnerInstanceId":"runner_1","environmentLeaseId":"env_1","runId":"run_2","normalizedSessionId":"s1","turnId":"t2","itemId":"i2"}`
	steps, err := parseScript(strings.NewReader(`{"attach":{"identity":` + id +
		`,"connection":{"mode":"connect","connectUrl":"ws://127.0.0.1:9/api/runner/v1/connect/run_2"},"payload":{"provider":{"kind":"acpx"}}}}`))
	require.NoError(t, err)
	require.Len(t, steps, 1)
	require.Equal(t, "run.attach", steps[0].Command)
	require.JSONEq(t, `{"provider":{"kind":"acpx"},"paperclipNextAuthority":{"identity":`+id+
		`,"connection":{"mode":"connect","connectUrl":"ws://127.0.0.1:9/api/runner/v1/connect/run_2"}}}`, string(steps[0].Payload))

	for _, bad := range []string{
		`{"attach":{"identity":{"runId":"zzqq"},"connection":{"mode":"connect","connectUrl":"ws://x"}}}`, // five ids missing
		`{"attach":{"identity":` + id + `,"connection":{"mode":"zzqq"}}}`,
		`{"attach":{"identity":` + id + `}}`,
		`{"attach":{"identity":` + id + `,"connection":{"mode":"connect","connectUrl":"ws://x"}},"ping":true}`,
		`{"attach":{"identity":` + id + `,"connection":{"mode":"connect","connectUrl":"ws://x"},"payload":{"paperclipNextAuthority":{}}}}`,
	} {
		_, err := parseScript(strings.NewReader(bad))
		require.ErrorIs(t, err, errScript, bad)
		require.NotContains(t, err.Error(), "zzqq", "errors never echo script content")
	}
}

// TestParseAttachStepAutoConnection: "connection":"auto" parses to a
// run.attach whose route execute fills in for the new runId (the session's
// own: a script cannot know the port), keeping the identity and seed.
func TestParseAttachStepAutoConnection(t *testing.T) {
	const id = `{"runnerInstanceId":"runner_1","environmentLeaseId":"env_1","runId":"run_2","normalizedSessionId":"s1","turnId":"t2","itemId":"i2"}`
	steps, err := parseScript(strings.NewReader(`{"attach":{"identity":` + id + `,"connection":"auto","payload":{"provider":{"kind":"acpx"}}}}`))
	require.NoError(t, err)
	require.Len(t, steps, 1)
	require.True(t, steps[0].autoConnection)
	got, err := withConnection(steps[0].Payload, func(runID string) json.RawMessage {
		return json.RawMessage(`{"mode":"listen","listenAddress":"127.0.0.1","listenPort":4000,"listenPath":"/api/runner/v1/connect/` + runID + `"}`)
	})
	require.NoError(t, err)
	require.JSONEq(t, `{"provider":{"kind":"acpx"},"paperclipNextAuthority":{"identity":`+id+
		`,"connection":{"mode":"listen","listenAddress":"127.0.0.1","listenPort":4000,"listenPath":"/api/runner/v1/connect/run_2"}}}`, string(got))
	_, err = parseScript(strings.NewReader(`{"attach":{"identity":` + id + `,"connection":"zzqq"}}`))
	require.ErrorIs(t, err, errScript)
	require.NotContains(t, err.Error(), "zzqq")
}

// TestParseEventAndToolSteps: waitEvent, resolve, toolResults and
// toolErrors are steps of their own; bad values are refused without
// echoing them.
func TestParseEventAndToolSteps(t *testing.T) {
	steps, err := parseScript(strings.NewReader(`
{"toolResults":{"issue.comment":{"ok":true},"paperclip_finish":{"success":true}}}
{"toolErrors":{"paperclip_finish":{"success":false,"contentItems":[{"type":"inputText","text":"again"}]}}}
{"waitEvent":"run.terminal"}
{"resolve":"allow"}
{"resolve":"cancel"}
`))
	require.NoError(t, err)
	require.Len(t, steps, 5)
	require.JSONEq(t, `{"ok":true}`, string(steps[0].ToolResults["issue.comment"]))
	require.Contains(t, string(steps[1].ToolErrors["paperclip_finish"]), "again")
	require.Equal(t, "run.terminal", steps[2].WaitEvent)
	require.Equal(t, "allow", steps[3].Resolve)

	for _, bad := range []string{
		`{"waitEvent":"run zzqq"}`,
		`{"resolve":"zzqq"}`,
		`{"toolResults":{"zzqq":null}}`,
		`{"toolResults":{"":{}}}`,
		`{"waitEvent":"run.terminal","resolve":"allow"}`,
		`{"toolResults":{"a":1},"wait":true}`,
	} {
		_, err := parseScript(strings.NewReader(bad))
		require.ErrorIs(t, err, errScript, bad)
		require.NotContains(t, err.Error(), "zzqq", "errors never echo script content")
	}
}
