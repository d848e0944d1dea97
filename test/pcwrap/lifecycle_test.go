package pcwrap_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// sh returns a payload running script under sh -c.
func sh(script string) payload { return payload{Command: "sh", Args: []string{"-c", script}} }

// groupMembers lists the live (non-zombie) processes in process group pgid.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		st := string(b)
		i := strings.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(st[i+1:])
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// childRecord waits for .pcwrap.child and returns its pgid.
func (s *session) childPgid() int {
	s.t.Helper()
	var pgid int
	eventually(s.t, 5*time.Second, ".pcwrap.child", func() bool {
		b, err := os.ReadFile(filepath.Join(s.dir, sessiondir.ChildFile))
		if err != nil {
			return false
		}
		_, err = fmt.Sscanf(string(b), `{"pgid":%d,`, &pgid)
		return err == nil
	})
	return pgid
}

func groupGone(t *testing.T, pgid int, d time.Duration) {
	t.Helper()
	eventually(t, d, fmt.Sprintf("process group %d to be empty", pgid), func() bool { return len(groupMembers(pgid)) == 0 })
}

// TestPcwrap11_RemovedSessionDirEndsPcwrap (T1) and
// TestPcwrap51 (orphans): rm -rf of the session dir latches the identity
// and terminates the child.
func TestPcwrap11_RemovedSessionDirEndsPcwrap(t *testing.T) {
	t.Parallel()
	s := start(t, opts{env: []string{"PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS=200"}})
	s.childPgid() // the identity is captured before the spawn records the child
	require.NoError(t, os.RemoveAll(s.dir))
	s.wait(4 * time.Second)
}

// TestPcwrap51_RemovedDirKillsChild: rm -rf with child sh -c 'sleep 300'
// → pcwrap and child exit within 10 s.
func TestPcwrap51_RemovedDirKillsChild(t *testing.T) {
	t.Parallel()
	s := start(t, opts{payload: sh("sleep 300")})
	pgid := s.childPgid()
	require.NoError(t, os.RemoveAll(s.dir))
	s.wait(10 * time.Second)
	groupGone(t, pgid, 10*time.Second)
}

// TestPcwrap64_LatchInStdoutMode: the identity latch in stdout mode.
func TestPcwrap64_LatchInStdoutMode(t *testing.T) {
	t.Parallel()
	s := start(t, opts{mode: "stdout", payload: sh("sleep 300")})
	pgid := s.childPgid()
	require.NoError(t, os.RemoveAll(s.dir))
	assert.Equal(t, 1, s.wait(4*time.Second))
	groupGone(t, pgid, 4*time.Second)
	fr := s.frames()
	require.NotEmpty(t, fr)
	assert.Equal(t, frame.FrameShutdownAck, fr[0].Type)
	last := fr[len(fr)-1]
	assert.Equal(t, frame.FrameExit, last.Type)
	assert.Equal(t, "SIGTERM", last.Signal)
}

// TestPcwrap13_ChildExitEndsPcwrap (T3) and TestPcwrap50: a child that
// exits with no stdinEnd ends pcwrap; an exit event exists.
func TestPcwrap13_ChildExitEndsPcwrap(t *testing.T) {
	t.Parallel()
	s := start(t, opts{payload: payload{Command: "true"}})
	assert.Equal(t, 0, s.wait(4*time.Second))
	assert.Equal(t, 1, count(readEvents(t, s.dir), frame.FrameExit))
}

// TestPcwrap50_TrueChildEventsMode: child `true`, no stdinEnd → exit.
func TestPcwrap50_TrueChildEventsMode(t *testing.T) {
	t.Parallel()
	s := start(t, opts{mode: "events", payload: payload{Command: "true"}})
	s.wait(10 * time.Second)
}

// TestPcwrap54_TrueChildStdoutMode: stdout mode, child `true` → exit.
func TestPcwrap54_TrueChildStdoutMode(t *testing.T) {
	t.Parallel()
	s := start(t, opts{mode: "stdout", payload: payload{Command: "true"}})
	assert.Equal(t, 0, s.wait(10*time.Second))
	fr := s.frames()
	require.Len(t, fr, 2)
	assert.Equal(t, `{"seq":1,"type":"exit","code":0,"signal":null}`, s.raw[0])
	assert.Equal(t, `{"seq":2,"type":"shutdownAck"}`, s.raw[1])
}

// TestPcwrap18_CleanExit (T8): exit status 0, empty stderr, one exit
// event, no error events; event files are exactly JSON.stringify + "\n".
func TestPcwrap18_CleanExit(t *testing.T) {
	t.Parallel()
	s := start(t, opts{payload: sh("printf hi")})
	assert.Equal(t, 0, s.wait(waitBound))
	assert.Empty(t, s.stderr.String())
	fr := readEvents(t, s.dir)
	assert.Equal(t, 1, count(fr, frame.FrameExit))
	assert.Zero(t, count(fr, frame.FrameError))
	b, err := os.ReadFile(filepath.Join(s.dir, "events", "000000000001.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"type":"data","stream":"stdout","data":"aGk="}`+"\n", string(b))
	b, err = os.ReadFile(filepath.Join(s.dir, "events", "000000000002.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"type":"exit","code":0,"signal":null}`+"\n", string(b))
	b, err = os.ReadFile(filepath.Join(s.dir, "events", "000000000003.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"type":"shutdownAck"}`+"\n", string(b))
	ents, _ := os.ReadDir(filepath.Join(s.dir, "events"))
	assert.Len(t, ents, 3, "no temp files left")
}

// TestPcwrap19_SymlinkedSessionDirStdout (T9): a symlinked session dir
// in stdout mode → an error frame naming the symbolic link.
func TestPcwrap19_SymlinkedSessionDirStdout(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	real := filepath.Join(root, "real")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "stdin"), 0o700))
	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(real, link))
	s := start(t, opts{mode: "stdout", dir: link, noMkdir: true})
	assert.Equal(t, 1, s.wait(4*time.Second))
	fr := s.frames()
	assert.True(t, hasError(fr, "symbolic link"), "%v", s.raw)
	assert.Equal(t, frame.FrameShutdownAck, fr[len(fr)-1].Type)
	assert.False(t, exists(filepath.Join(real, sessiondir.LockFile)), "nothing created through the link")
}

// TestPcwrap61_SymlinkedSessionDirEvents: events mode → stderr refusal,
// exit 1, nothing created through the link. With a target that already
// holds events/ → the same, plus the error event there (§2.5, as the
// reference), and nothing else created.
func TestPcwrap61_SymlinkedSessionDirEvents(t *testing.T) {
	t.Parallel()
	const refusal = "Refusing a symbolic link on a process session control path."
	linked := func(t *testing.T, withEvents bool) (real string, s *session) {
		root := t.TempDir()
		real = filepath.Join(root, "real")
		require.NoError(t, os.MkdirAll(real, 0o700))
		if withEvents {
			require.NoError(t, os.Mkdir(filepath.Join(real, sessiondir.EventsDir), 0o700))
		}
		link := filepath.Join(root, "link")
		require.NoError(t, os.Symlink(real, link))
		s = start(t, opts{mode: "events", dir: link, noMkdir: true})
		assert.Equal(t, 1, s.wait(4*time.Second))
		assert.Contains(t, s.stderr.String(), refusal)
		return real, s
	}
	t.Run("empty target", func(t *testing.T) {
		t.Parallel()
		real, _ := linked(t, false)
		ents, err := os.ReadDir(real)
		require.NoError(t, err)
		assert.Empty(t, ents, "nothing may be created through the link")
	})
	t.Run("target with events", func(t *testing.T) {
		t.Parallel()
		real, _ := linked(t, true)
		ents, err := os.ReadDir(real)
		require.NoError(t, err)
		require.Len(t, ents, 1, "only the existing events/: %v", ents)
		evs, err := os.ReadDir(filepath.Join(real, sessiondir.EventsDir))
		require.NoError(t, err)
		require.Len(t, evs, 1, "exactly the error event: %v", evs)
		assert.Equal(t, sessiondir.SeqName(1), evs[0].Name())
		b, err := os.ReadFile(filepath.Join(real, sessiondir.EventsDir, evs[0].Name()))
		require.NoError(t, err)
		fr, err := frame.ParseFrame(b)
		require.NoError(t, err)
		assert.Equal(t, frame.ErrorFrame(refusal), fr)
	})
}

// TestPcwrap20_SessionEnvStripped (T10): the child sees no
// PAPERCLIP_PROCESS_SESSION* variable, even one the payload sets.
func TestPcwrap20_SessionEnvStripped(t *testing.T) {
	t.Parallel()
	p := sh(`k=$(env | cut -d= -f1 | grep '^PAPERCLIP_PROCESS_SESSION' | tr '\n' ,); if [ -z "$k" ]; then printf '[]'; else printf '%s' "$k"; fi`)
	p.Env = map[string]string{"PAPERCLIP_PROCESS_SESSION_EXTRA": "x", "KEEP_ME": "y"}
	s := start(t, opts{mode: "stdout", payload: p, env: []string{
		"PAPERCLIP_PROCESS_SESSION_STDIN_MAX_RETRIES=7", "PAPERCLIP_PROCESS_SESSION_OTHER=1",
	}})
	assert.Equal(t, 0, s.wait(waitBound))
	assert.Equal(t, "[]", output(s.frames(), frame.StreamStdout))
}

// TestPayloadEnvAndPathOfChild: the payload env overlays pcwrap's, and a
// bare command resolves through the CHILD's PATH (spec §2.4).
func TestPayloadEnvAndPathOfChild(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "only-in-child-path"), []byte("#!/bin/sh\nprintf '%s' \"$GREETING\"\n"), 0o755))
	p := payload{Command: "only-in-child-path", Env: map[string]string{"PATH": bin + ":" + os.Getenv("PATH"), "GREETING": "hello"}}
	s := start(t, opts{mode: "stdout", payload: p})
	assert.Equal(t, 0, s.wait(waitBound))
	assert.Equal(t, "hello", output(s.frames(), frame.StreamStdout))
}

// TestPcwrap52_SigtermEndsPcwrapAndChild.
func TestPcwrap52_SigtermEndsPcwrapAndChild(t *testing.T) {
	t.Parallel()
	s := start(t, opts{payload: sh("sleep 300")})
	pgid := s.childPgid()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 1, s.wait(10*time.Second))
	groupGone(t, pgid, 10*time.Second)
}

// TestPcwrap53_SigkillEscalation: a child trapping TERM is killed after
// the grace.
func TestPcwrap53_SigkillEscalation(t *testing.T) {
	t.Parallel()
	s := start(t, opts{
		payload: sh(`trap '' TERM; echo ready; while :; do sleep 1; done`),
		env:     []string{"PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS=500"},
		mode:    "stdout",
	})
	pgid := s.childPgid()
	s.waitOutput(5*time.Second, "ready\n")
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 1, s.wait(10*time.Second))
	groupGone(t, pgid, 5*time.Second)
	fr := s.frames()
	assert.Equal(t, "SIGKILL", fr[len(fr)-1].Signal)
}

// TestPcwrap55_GroupKilledAfterGrace: a grandchild ignoring TERM is
// killed with its group after a shutdown message. Also when its stdio is
// on /dev/null, so the leader's pipes close at once as it dies on SIGTERM
// (§8.1 step 2: reaping the leader must not cancel the group SIGKILL);
// that race runs orphanRuns times, with zero survivors.
func TestPcwrap55_GroupKilledAfterGrace(t *testing.T) {
	t.Parallel()
	t.Run("grandchild holds the pipes", func(t *testing.T) {
		t.Parallel()
		shutdownTermIgnoringGrandchild(t, `sh -c 'trap "" TERM; echo ready; sleep 300' & wait`, 300)
	})
	t.Run("grandchild on /dev/null", func(t *testing.T) {
		t.Parallel()
		for i := range orphanRuns {
			ok := t.Run(strconv.Itoa(i), func(t *testing.T) {
				shutdownTermIgnoringGrandchild(t, detachedTermIgnorer, 200)
			})
			if !ok {
				break // one survivor is the verdict; the rest would repeat it
			}
		}
	})
}

// orphanRuns is how often the detached-grandchild shutdown runs (required:
// 100 shutdowns, zero survivors). Each takes about one 200 ms grace.
const orphanRuns = 100

// detachedTermIgnorer is a leader that dies on SIGTERM at once and a
// grandchild that ignores TERM with its stdio off the leader's pipes.
const detachedTermIgnorer = `sh -c 'trap "" TERM; echo ready; exec sleep 300 </dev/null >/dev/null 2>&1' & wait`

// shutdownTermIgnoringGrandchild runs script, sends shutdown once it said
// ready, and requires the whole group dead after pcwrap exits.
func shutdownTermIgnoringGrandchild(t *testing.T, script string, graceMS int) {
	s := start(t, opts{
		payload: sh(script),
		env:     []string{"PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS=" + strconv.Itoa(graceMS)},
		mode:    "stdout",
	})
	pgid := s.childPgid()
	t.Cleanup(func() {
		// A survivor keeps the group id reserved, so this reaches only it.
		if len(groupMembers(pgid)) > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	s.waitOutput(5*time.Second, "ready\n")
	s.put(1, shutdownMsg)
	s.wait(10 * time.Second)
	groupGone(t, pgid, 5*time.Second)
	fr := s.frames()
	assert.Equal(t, frame.FrameShutdownAck, fr[1].Type, "shutdownAck precedes exit")
}

// TestPcwrap56_SighupUnderNohup: pcwrap under nohup survives SIGHUP and
// its child starts with the default SIGHUP disposition.
func TestPcwrap56_SighupUnderNohup(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/nohup"); err != nil {
		t.Skip("nohup not installed")
	}
	s := start(t, opts{
		wrapper: []string{"/usr/bin/nohup"},
		mode:    "stdout",
		payload: sh(`grep SigIgn /proc/self/status; exec cat`),
	})
	s.waitFrame(5*time.Second, "SigIgn line", func(fr []frame.Frame) bool {
		return strings.Contains(output(fr, frame.StreamStdout), "\n")
	})
	line := strings.TrimSpace(strings.TrimPrefix(output(s.frames(), frame.StreamStdout), "SigIgn:"))
	mask, err := strconv.ParseUint(line, 16, 64)
	require.NoError(t, err)
	assert.Zero(t, mask&1, "SIGHUP must not be ignored in the child")
	pgid := s.childPgid()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
	// A stdin round trip through pcwrap and cat after the signal: a
	// pending SIGHUP is delivered before pcwrap runs again, so an echo
	// proves both survived it.
	s.put(1, stdinMsg("after-hup\n"))
	s.waitFrame(5*time.Second, "echo after SIGHUP", func(fr []frame.Frame) bool {
		return strings.HasSuffix(output(fr, frame.StreamStdout), "after-hup\n")
	})
	assert.False(t, s.exited(), "pcwrap must survive SIGHUP")
	assert.NotEmpty(t, groupMembers(pgid), "the child must survive SIGHUP")
	s.put(2, stdinEndMsg)
	assert.Equal(t, 0, s.wait(waitBound))
}

// TestPcwrap57_SpawnENOENT: error, exit 127, shutdownAck; status 127.
func TestPcwrap57_SpawnENOENT(t *testing.T) {
	t.Parallel()
	s := start(t, opts{mode: "stdout", payload: payload{Command: "does-not-exist"}})
	assert.Equal(t, 127, s.wait(waitBound))
	assert.Equal(t, []string{
		`{"seq":1,"type":"error","message":"spawn does-not-exist ENOENT"}`,
		`{"seq":2,"type":"exit","code":127,"signal":null}`,
		`{"seq":3,"type":"shutdownAck"}`,
	}, s.raw)
}

// TestPcwrap62_StagedPayload: a payload over 64 KiB of base64 staged in
// command.b64 starts the child, and the file is gone before its output.
func TestPcwrap62_StagedPayload(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "session")
	p := sh(`if [ -e "$CHECK_DIR/command.b64" ]; then printf present; else printf gone; fi; printf ' %s' "${#BIG}"`)
	p.Env = map[string]string{"CHECK_DIR": dir, "BIG": strings.Repeat("x", 70*1024)}
	require.Greater(t, len(p.b64(t)), 64*1024)
	s := start(t, opts{mode: "stdout", dir: dir, payload: p, stagePayl: true})
	assert.Equal(t, 0, s.wait(waitBound))
	assert.Equal(t, fmt.Sprintf("gone %d", 70*1024), output(s.frames(), frame.StreamStdout))
}

// TestPcwrap63_CommandFileSymlink: a symlinked command.b64 is refused
// with the fixed message; no child runs.
func TestPcwrap63_CommandFileSymlink(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "session")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "stdin"), 0o700))
	marker := filepath.Join(root, "child-ran")
	target := filepath.Join(root, "payload.b64")
	require.NoError(t, os.WriteFile(target, []byte(sh("touch "+marker).b64(t)), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "command.b64")))
	s := start(t, opts{mode: "stdout", dir: dir, noMkdir: true, stagePayl: false, env: []string{"PAPERCLIP_PROCESS_SESSION_COMMAND_B64="}})
	assert.Equal(t, 1, s.wait(waitBound))
	assert.Equal(t, []string{
		`{"seq":1,"type":"error","message":"Failed to read sandbox process session command payload."}`,
		`{"seq":2,"type":"shutdownAck"}`,
	}, s.raw)
	assert.False(t, exists(marker), "no child may run")
	assert.True(t, exists(target), "the link target is untouched")
}

// TestBrokenPayloadFixedMessage: invalid payloads never echo content.
func TestBrokenPayloadFixedMessage(t *testing.T) {
	t.Parallel()
	for _, b64 := range []string{"!!!not base64 secret-xyz", "eyJjb21tYW5kIjo", "WzEsMl0="} {
		s := start(t, opts{mode: "stdout", env: []string{"PAPERCLIP_PROCESS_SESSION_COMMAND_B64=" + b64}})
		assert.Equal(t, 1, s.wait(waitBound))
		assert.Equal(t, []string{
			`{"seq":1,"type":"error","message":"Failed to read sandbox process session command payload."}`,
			`{"seq":2,"type":"shutdownAck"}`,
		}, s.raw)
		assert.NotContains(t, s.stderr.String(), "secret-xyz")
	}
}

// TestLenientPayloadBase64: whitespace and missing padding are accepted.
func TestLenientPayloadBase64(t *testing.T) {
	t.Parallel()
	b64 := strings.TrimRight(sh("printf ok").b64(t), "=")
	b64 = b64[:10] + "\n  " + b64[10:]
	s := start(t, opts{mode: "stdout", env: []string{"PAPERCLIP_PROCESS_SESSION_COMMAND_B64=" + b64}})
	assert.Equal(t, 0, s.wait(waitBound))
	assert.Equal(t, "ok", output(s.frames(), frame.StreamStdout))
}

// TestPcwrap65_StdoutReaderGone: the reader of pcwrap's stdout closes →
// the child group is terminated and pcwrap exits without SIGPIPE death.
func TestPcwrap65_StdoutReaderGone(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	s := start(t, opts{mode: "stdout", stdout: w, payload: sh(`while :; do echo tick; sleep 0.05; done`)})
	w.Close()
	pgid := s.childPgid()
	buf := make([]byte, 64)
	_, err = r.Read(buf)
	require.NoError(t, err)
	r.Close()
	code := s.wait(10 * time.Second)
	assert.Equal(t, 1, code)
	if s.state != nil {
		ws := s.state.Sys().(syscall.WaitStatus)
		assert.False(t, ws.Signaled(), "pcwrap died from signal %v", ws.Signal())
	}
	groupGone(t, pgid, 5*time.Second)
}

// TestPcwrap69_BoundedDrain: a background sleep holding stdout cannot
// hold the exit frame; it is killed with the group.
func TestPcwrap69_BoundedDrain(t *testing.T) {
	t.Parallel()
	s := start(t, opts{mode: "stdout", payload: sh(`sleep 300 & echo started`)})
	pgid := s.childPgid()
	s.waitFrame(3*time.Second+drainSlack, "exit frame", func(fr []frame.Frame) bool {
		return count(fr, frame.FrameExit) == 1
	})
	fr := s.frames()
	assert.Equal(t, "started\n", output(fr, frame.StreamStdout))
	var exit frame.Frame
	for _, f := range fr {
		if f.Type == frame.FrameExit {
			exit = f
		}
	}
	require.NotNil(t, exit.Code)
	assert.Equal(t, 0, *exit.Code)
	assert.Equal(t, 0, s.wait(waitBound))
	groupGone(t, pgid, 5*time.Second)
}

// drainSlack absorbs scheduling noise of a shared machine on top of the
// scenario's 3 s bound.
const drainSlack = 2 * time.Second

// TestPcwrap70_KillNinePcwrapKillsChild: the parent-death signal takes
// the child with a SIGKILLed pcwrap; .pcwrap.child names its group.
func TestPcwrap70_KillNinePcwrapKillsChild(t *testing.T) {
	t.Parallel()
	s := start(t, opts{payload: payload{Command: "sleep", Args: []string{"300"}}})
	pgid := s.childPgid()
	b, err := os.ReadFile(filepath.Join(s.dir, sessiondir.ChildFile))
	require.NoError(t, err)
	rec, err := procsession.ParseChildRecord(b)
	require.NoError(t, err)
	assert.Equal(t, pgid, rec.Pgid)
	start := rec.StartTime
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pgid))
	require.NoError(t, err)
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	assert.Equal(t, strconv.FormatUint(start, 10), f[19], "startTime is field 22 of /proc/<pid>/stat")
	info, err := os.Stat(filepath.Join(s.dir, sessiondir.ChildFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGKILL))
	s.wait(waitBound)
	groupGone(t, pgid, 1*time.Second+drainSlack)
}
