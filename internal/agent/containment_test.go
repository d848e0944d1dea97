package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/terminal"
)

// readPidFile waits for a pid written to path.
func readPidFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// running reports a live (not zombie) process.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(b), ") Z ")
}

func oomScoreAdj(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/oom_score_adj")
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// TestSessionEndLeavesNothing: an agent that left a setsid daemon, and a
// client terminal whose job left its group by setsid, leave nothing
// behind after session.close or runner.shutdown (the orderly stop). The
// agent and the terminal start with pcwrap's OOM policy (oom_score_adj
// 500) while runnerd keeps its own.
func TestSessionEndLeavesNothing(t *testing.T) {
	own := oomScoreAdj(t, os.Getpid())
	for _, end := range []string{"session.close", "runner.shutdown"} {
		t.Run(end, func(t *testing.T) {
			dir := t.TempDir()
			daemonPid, jobPid := filepath.Join(dir, "daemon"), filepath.Join(dir, "job")
			r := newRig(t)
			r.prepare("--setsid-daemon", daemonPid)
			r.open()
			agent := agentPgid(t, r.sessionDir())
			daemon := readPidFile(t, daemonPid)

			r.m.mu.Lock()
			rec := r.m.cl.Record()
			params, _ := json.Marshal(map[string]any{"sessionId": rec.ACPSessionID, "command": "sh", "args": []string{"-c",
				`setsid sh -c 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 300' ` + jobPid + ` </dev/null >/dev/null 2>&1 & exec sleep 300`}})
			r.m.mu.Unlock()
			r.handleAsAgent(t, provider.Inbound{Kind: provider.KindRequest, ID: json.RawMessage(`"t1"`), Method: terminal.MethodCreate, Params: params})
			job := readPidFile(t, jobPid)

			if n, _ := strconv.Atoi(own); n <= 500 {
				assert.Equal(t, "500", oomScoreAdj(t, agent), "the agent's oom_score_adj")
				assert.Equal(t, "500", oomScoreAdj(t, job), "a terminal's oom_score_adj")
				assert.Equal(t, "500", oomScoreAdj(t, daemon), "inherited by what the agent starts")
			}
			assert.Equal(t, own, oomScoreAdj(t, os.Getpid()), "runnerd keeps its own")

			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			if end == "session.close" {
				_, err := r.m.CloseSession(ctx)
				require.NoError(t, err)
			} else {
				r.m.Shutdown(ctx)
			}
			for what, pid := range map[string]int{"agent": agent, "setsid daemon": daemon, "terminal's setsid job": job} {
				eventually(t, what+" gone", func() bool { return !running(pid) })
			}
		})
	}
}

// TestKilledPcwrapCgroupEnded: kill -9 of an agent's pcwrap takes only
// the agent with it (its parent-death signal); the kernel does not end
// the cgroup. runnerd finds the wrapper gone (transport_closed) and ends
// what the session's recorded cgroup still holds: the agent's setsid
// daemon dies and the cgroup is removed.
func TestKilledPcwrapCgroupEnded(t *testing.T) {
	daemonPid := filepath.Join(t.TempDir(), "daemon")
	r := newRig(t)
	r.prepare("--setsid-daemon", daemonPid)
	r.open()
	dir := r.sessionDir()
	agent := agentPgid(t, dir)
	daemon := readPidFile(t, daemonPid)
	rec, err := procsession.ReadChildRecord(dir)
	require.NoError(t, err)
	if rec.Cgroup == "" {
		t.Skip("no writable cgroup2 hierarchy: pcwrap made no cgroup, and a SIGKILLed pcwrap's escaped descendants are out of reach")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(agent) + "/stat")
	require.NoError(t, err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	pcwrap, err := strconv.Atoi(f[1])
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pcwrap, syscall.SIGKILL))

	eventually(t, "the setsid daemon gone", func() bool { return !running(daemon) })
	eventually(t, "the cgroup removed", func() bool { _, err := os.Stat(rec.Cgroup); return os.IsNotExist(err) })
	assert.False(t, running(agent))
}
