package realagents

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// agentBound bounds each wait on a real agent: a cold Node agent start
// (Claude Code, Gemini CLI) takes several seconds on 2 shared cores, a
// turn a few more.
const agentBound = 120 * time.Second

var identity = prp.Identity{
	RunnerInstanceID: "runner_real", EnvironmentLeaseID: "env_real", RunID: "run_real",
	NormalizedSessionID: "session_real", TurnID: "turn_real", ItemID: "item_real",
}

const (
	runnerVersion = "0.0.0-realagents"
	runnerDigest  = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// rig is one agent session's world: a core on loopback, fakellm, a HOME
// holding the agent's config, one runnerd state dir.
type rig struct {
	t      *testing.T
	core   *prptest.Core
	url    string
	dir    string
	home   string
	env    []string
	args   []string
	stderr *syncbuf.Buffer
	record string // fakellm's request record
}

func newRig(t *testing.T, spec agentSpec, agentDir string) *rig {
	t.Helper()
	core := prptest.NewCore(t, control.Config{Identity: identity, RunnerVersion: runnerVersion, RunnerDigest: runnerDigest})
	core.WaitBound = agentBound
	r := &rig{t: t, core: core, url: core.ServeLoopback(), dir: filepath.Join(t.TempDir(), "state"), home: t.TempDir()}
	r.record = filepath.Join(t.TempDir(), "fakellm.ndjson")
	llm := startFakellm(t, r.record)
	extra := spec.configure(t, r.home, llm)
	path := filepath.Join(agentDir, "node_modules", ".bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	// The agents' scratch files stay in the test's own directory.
	r.env = append([]string{"HOME=" + r.home, "PATH=" + path, "TMPDIR=" + t.TempDir()}, extra...)
	r.args = []string{
		"--state-dir", r.dir,
		"--runner-id", identity.RunnerInstanceID, "--environment-lease-id", identity.EnvironmentLeaseID,
		"--run-id", identity.RunID, "--session-id", identity.NormalizedSessionID,
		"--turn-id", identity.TurnID, "--item-id", identity.ItemID,
		"--runner-version", runnerVersion, "--runner-digest", runnerDigest,
		"--reconnect-delay-ms", "5", "--lifecycle-mode", "warm", "--idle-timeout-ms", "600000",
		"--connect-url", r.url, "--pcwrap-path", testbin.Path(t, "pcwrap"), "--cancel-grace-ms", "5000",
		"--session-open-cold-timeout-agent", spec.name + "=90000",
	}
	t.Cleanup(func() {
		// No process of this agent session may outlive it: not the agent,
		// nor any child that left its process group.
		var left []int
		deadline := time.Now().Add(agentBound)
		for {
			if left = processesWithHome(r.home); len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(left) > 0 {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Errorf("processes left behind: %v", left)
		}
	})
	return r
}

// env builds runnerd's environment: this process's, with HOME, PATH and
// the agent's variables replaced.
func (r *rig) environ(ticket string) []string {
	override := map[string]bool{}
	for _, kv := range r.env {
		k, _, _ := strings.Cut(kv, "=")
		override[k] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !override[k] {
			out = append(out, kv)
		}
	}
	return append(append(out, r.env...), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET="+ticket)
}

// start launches runnerd; cleanup stops it with SIGTERM (an orderly stop
// stops its agents).
func (r *rig) start() *exec.Cmd {
	t := r.t
	t.Helper()
	ticket, err := r.core.MintTicket()
	require.NoError(t, err)
	r.stderr = &syncbuf.Buffer{}
	cmd := exec.Command(testbin.Path(t, "runnerd"), r.args...)
	cmd.Env = r.environ(ticket)
	cmd.Stderr = r.stderr
	require.NoError(t, cmd.Start())
	buf := r.stderr
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			waitExit(t, cmd)
		}
		if t.Failed() {
			t.Logf("runnerd (pid %d) stderr:\n%s", cmd.Process.Pid, tail(buf.String(), 60))
			t.Logf("core events: %v", types(r.events()))
			if b, err := os.ReadFile(r.record); err == nil {
				t.Logf("fakellm requests: %s", offeredTools(b))
			}
		} else if w := warnings(buf.String()); w != "" {
			// A real agent's surprises show up here first.
			t.Logf("runnerd (pid %d) warnings:\n%s", cmd.Process.Pid, tail(w, 40))
		}
	})
	return cmd
}

func waitExit(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(agentBound):
		_ = cmd.Process.Kill()
		<-done
		t.Error("runnerd did not exit in time")
	}
}

// offeredTools lists each recorded model request's path and the names of
// the tools it offered (Anthropic and OpenAI shapes), for a failure's log.
func offeredTools(record []byte) string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(record)), "\n") {
		var req struct {
			Path string `json:"path"`
			Body struct {
				Tools []struct {
					Name     string `json:"name"`
					Function struct {
						Name string `json:"name"`
					} `json:"function"`
				} `json:"tools"`
			} `json:"body"`
		}
		if json.Unmarshal([]byte(line), &req) != nil {
			continue
		}
		var names []string
		for _, tl := range req.Body.Tools {
			names = append(names, tl.Name+tl.Function.Name)
		}
		out = append(out, fmt.Sprintf("%s %v", req.Path, names))
	}
	return strings.Join(out, "\n")
}

// warnings keeps runnerd's WARN and ERROR log lines.
func warnings(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (r *rig) wait(cond func(s control.Snapshot) bool) control.Snapshot {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), agentBound)
	defer cancel()
	require.NoError(r.t, r.core.Wait(ctx, cond))
	return r.core.Snapshot()
}

func (r *rig) queue(typ string, payload any) string {
	r.t.Helper()
	b, err := json.Marshal(payload)
	require.NoError(r.t, err)
	cmd, err := r.core.QueueCommand(prp.Command{Type: typ, Payload: b})
	require.NotEmpty(r.t, cmd.CommandID, "queue %s: %v", typ, err)
	return cmd.CommandID
}

func (r *rig) result(id string) prp.CommandResultPayload {
	r.t.Helper()
	s := r.wait(func(s control.Snapshot) bool { return s.Results[id] != nil })
	var res prp.CommandResultPayload
	require.NoError(r.t, json.Unmarshal(s.Results[id], &res))
	return res
}

// must runs a command and requires it completed.
func (r *rig) must(typ string, payload any) prp.CommandResultPayload {
	r.t.Helper()
	res := r.result(r.queue(typ, payload))
	require.Equal(r.t, "completed", res.Status, "%s: %s", typ, res.Result)
	return res
}

func (r *rig) events() []prptest.Event { return prptest.DecodeEvents(r.t, r.core.Snapshot().Events) }

// waitCount waits until n events of type typ are committed.
func (r *rig) waitCount(typ string, n int) []prptest.Event {
	r.t.Helper()
	s := r.wait(func(s control.Snapshot) bool {
		return len(prptest.OfType(prptest.DecodeEvents(r.t, s.Events), typ)) >= n
	})
	return prptest.DecodeEvents(r.t, s.Events)
}

func payload(t *testing.T, e prptest.Event) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(e.Payload, &m))
	return m
}

// turnEvents are the events after the n-1th run.terminal up to and with
// the nth.
func turnEvents(evs []prptest.Event, n int) []prptest.Event {
	seen, start := 0, 0
	for i, e := range evs {
		if e.EventType != "run.terminal" {
			continue
		}
		seen++
		if seen == n-1 {
			start = i + 1
		}
		if seen == n {
			return evs[start : i+1]
		}
	}
	return evs[start:]
}

// text joins the item.delta texts of evs.
func text(t *testing.T, evs []prptest.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.EventType == "item.delta" {
			if s, ok := payload(t, e)["text"].(string); ok {
				b.WriteString(s)
			}
		}
	}
	return b.String()
}

// childPgid reads the agent's process group from pcwrap's record.
func (r *rig) childPgid() int {
	r.t.Helper()
	ents, _ := os.ReadDir(filepath.Join(r.dir, "process-sessions"))
	var rec struct {
		Pgid int `json:"pgid"`
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(r.dir, "process-sessions", e.Name(), ".pcwrap.child"))
		if err == nil && json.Unmarshal(b, &rec) == nil && rec.Pgid > 0 {
			return rec.Pgid
		}
	}
	r.t.Fatal("no live agent process session")
	return 0
}

// startFakellm runs test/fakellm on loopback until the test ends (it exits
// on stdin EOF) and returns its base URL.
func startFakellm(t *testing.T, record string) string {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "test/fakellm"), "--exit-on-stdin-eof", "--idle", "30m", "--record", record)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "FAKELLM_URL=")
	require.True(t, ok, "fakellm said %q", line)
	return url
}
