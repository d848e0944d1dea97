package terminal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/procsession"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit)) }

// waitBound bounds every wait on a terminal in these tests.
const waitBound = 15 * time.Second

const sess = "sess-1"

type answer struct {
	id string
	st ExitStatus
}

type harness struct {
	t       *testing.T
	state   string
	pcwrap  string
	m       *Manager
	answers chan answer
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, state: t.TempDir(), pcwrap: testbin.Path(t, "pcwrap"), answers: make(chan answer, 64)}
	h.m = h.manager()
	t.Cleanup(func() { h.m.ReleaseAll(); h.m.Close() })
	return h
}

func (h *harness) manager() *Manager {
	return New(Config{StateDir: h.state, Pcwrap: h.pcwrap,
		Answer: func(id json.RawMessage, st ExitStatus) { h.answers <- answer{string(id), st} }})
}

func (h *harness) env() []string { return []string{"PATH=" + os.Getenv("PATH")} }

func (h *harness) create(script string) string {
	h.t.Helper()
	res, err := h.m.Create(CreateRequest{SessionID: sess, Command: "sh", Args: []string{"-c", script}}, h.state, h.env())
	require.NoError(h.t, err)
	return res.TerminalID
}

func (h *harness) output(id string) outputResult {
	h.t.Helper()
	out, err := h.m.Output(Request{SessionID: sess, TerminalID: id})
	require.NoError(h.t, err)
	return out
}

func (h *harness) waitOutput(id, want string) {
	h.t.Helper()
	eventually(h.t, "output "+strconv.Quote(want), func() bool { return strings.Contains(h.output(id).Output, want) })
}

// waitExit registers a wait_for_exit and returns its answer (at once or
// through Config.Answer).
func (h *harness) waitExit(id string, rpcID int) ExitStatus {
	h.t.Helper()
	st, done, err := h.m.WaitForExit(Request{SessionID: sess, TerminalID: id}, json.RawMessage(strconv.Itoa(rpcID)))
	require.NoError(h.t, err)
	if done {
		return st
	}
	return h.answer(rpcID)
}

func (h *harness) answer(rpcID int) ExitStatus {
	h.t.Helper()
	select {
	case a := <-h.answers:
		require.Equal(h.t, strconv.Itoa(rpcID), a.id)
		return a.st
	case <-time.After(waitBound):
		h.t.Fatal("wait_for_exit was not answered")
		return ExitStatus{}
	}
}

func (h *harness) pgid(id string) int {
	h.t.Helper()
	var pgid int
	eventually(h.t, ".pcwrap.child", func() bool {
		b, err := os.ReadFile(filepath.Join(procsession.Path(h.state, id), ".pcwrap.child"))
		if err != nil {
			return false
		}
		rec, err := procsession.ParseChildRecord(b)
		pgid = rec.Pgid
		return err == nil
	})
	h.t.Cleanup(func() {
		if len(groupMembers(pgid)) > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	return pgid
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupMembers lists the live (non-zombie) processes of group pgid.
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
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

func groupGone(t *testing.T, pgid int) {
	t.Helper()
	eventually(t, fmt.Sprintf("group %d to be empty", pgid), func() bool { return len(groupMembers(pgid)) == 0 })
}

// TestTools12_TerminalKillTermIgnoringGrandchild: a command whose shell
// and grandchild ignore TERM prints hi; kill while the leader runs leaves
// no process of its group, and wait_for_exit reports the SIGKILL.
func TestTools12_TerminalKillTermIgnoringGrandchild(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(`trap "" TERM; sleep 300 & echo hi; sleep 300`)
	pgid := h.pgid(id)
	h.waitOutput(id, "hi\n")
	assert.Nil(t, h.output(id).ExitStatus, "still running")
	_, done, err := h.m.WaitForExit(Request{SessionID: sess, TerminalID: id}, json.RawMessage(`"w1"`))
	require.NoError(t, err)
	require.False(t, done)
	require.NoError(t, h.m.Kill(Request{SessionID: sess, TerminalID: id}))
	select {
	case a := <-h.answers:
		assert.Equal(t, `"w1"`, a.id)
		require.NotNil(t, a.st.Signal)
		assert.Equal(t, "SIGKILL", *a.st.Signal, "the shell ignores TERM: the grace ends in KILL")
		assert.Nil(t, a.st.ExitCode)
	case <-time.After(waitBound):
		t.Fatal("wait_for_exit was not answered after kill")
	}
	groupGone(t, pgid)
	// The terminal stays for its output until release.
	out := h.output(id)
	assert.Equal(t, "hi\n", out.Output)
	require.NotNil(t, out.ExitStatus)
	require.NoError(t, h.m.Release(Request{SessionID: sess, TerminalID: id}))
	_, err = h.m.Output(Request{SessionID: sess, TerminalID: id})
	var te *Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, CodeResourceNotFound, te.Code)
}

// TestTools12_TerminalBackgroundOutlivesLeader: `sleep 300 & echo hi`
// reports its exit at once; the background sleep runs until release,
// which kills it and removes the terminal's files.
func TestTools12_TerminalBackgroundOutlivesLeader(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(`sleep 300 & echo hi`)
	pgid := h.pgid(id)
	st := h.waitExit(id, 1)
	require.NotNil(t, st.ExitCode)
	assert.Equal(t, 0, *st.ExitCode)
	assert.Equal(t, "hi\n", h.output(id).Output)
	assert.NotEmpty(t, groupMembers(pgid), "the background job outlives its leader")
	// A second wait answers at once.
	st = h.waitExit(id, 2)
	require.NotNil(t, st.ExitCode)

	require.NoError(t, h.m.Release(Request{SessionID: sess, TerminalID: id}))
	groupGone(t, pgid)
	eventually(t, "terminal files removed", func() bool {
		_, e1 := os.Stat(procsession.Path(h.state, id))
		_, e2 := os.Stat(filepath.Join(h.state, Dir, id+tailSuffix))
		return errors.Is(e1, os.ErrNotExist) && errors.Is(e2, os.ErrNotExist)
	})
}

// TestTools12_TerminalReadoptedAfterRestart: runnerd goes away (Close:
// no kill, no cleanup, as a SIGKILL leaves things) while a terminal runs
// with a wait_for_exit pending; a new manager adopts it, its output is
// still there, and the pending wait is answered when the command exits.
func TestTools12_TerminalReadoptedAfterRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := filepath.Join(t.TempDir(), "go")
	id := h.create(`echo before; while [ ! -e ` + gate + ` ]; do sleep 0.02; done; echo after; exit 4`)
	h.waitOutput(id, "before\n")
	_, done, err := h.m.WaitForExit(Request{SessionID: sess, TerminalID: id}, json.RawMessage(`7`))
	require.NoError(t, err)
	require.False(t, done)
	h.m.Close()

	h.m = h.manager()
	require.NoError(t, h.m.Adopt())
	assert.Equal(t, 1, h.m.Open())
	assert.Equal(t, "before\n", h.output(id).Output)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	st := h.answer(7)
	require.NotNil(t, st.ExitCode)
	assert.Equal(t, 4, *st.ExitCode)
	out := h.output(id)
	assert.Equal(t, "before\nafter\n", out.Output)
	require.NotNil(t, out.ExitStatus)
	assert.Equal(t, 4, *out.ExitStatus.ExitCode)
}

// TestTerminalReadoptedBeforeWrapperLocks: runnerd goes away right after
// it started a terminal's pcwrap, before pcwrap took .pcwrap.lock. The next
// runnerd knows the starting pcwrap by its recorded identity and follows
// the terminal to its exit, instead of taking it for gone.
func TestTerminalReadoptedBeforeWrapperLocks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	slow, gate := testbin.GatedPcwrap(t)
	h.pcwrap = slow
	h.m.Close()
	h.m = h.manager()
	id := h.create(`echo hi; exit 3`)
	h.m.Close() // the crash: pcwrap has not taken its lock yet

	h.m = h.manager()
	require.NoError(t, h.m.Adopt())
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	st, done, err := h.m.WaitForExit(Request{SessionID: sess, TerminalID: id}, json.RawMessage(`8`))
	require.NoError(t, err)
	if !done {
		st = h.answer(8)
	}
	require.NotNil(t, st.ExitCode, "the terminal ran to its exit")
	assert.Equal(t, 3, *st.ExitCode)
	assert.Equal(t, "hi\n", h.output(id).Output)
}

// TestSweepEndsOnlyUnrecorded: Sweep ends a process session that nothing
// records and leaves alone a terminal (its tail file records it) and the
// session keep claims.
func TestSweepEndsOnlyUnrecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := filepath.Join(t.TempDir(), "go")
	id := h.create(`echo up; while [ ! -e ` + gate + ` ]; do sleep 0.02; done; exit 5`)
	h.waitOutput(id, "up\n")
	start := func() (string, chan struct{}) {
		l, err := procsession.Launch(procsession.Spec{StateDir: h.state, Pcwrap: h.pcwrap,
			Argv: []string{"sleep", "300"}, Cwd: h.state, Env: h.env()})
		require.NoError(t, err)
		reaped := make(chan struct{})
		go func() { _ = l.Cmd.Wait(); close(reaped) }()
		t.Cleanup(func() { _ = l.Cmd.Process.Kill(); <-reaped })
		eventually(t, "pcwrap holds its lock", func() bool { return procsession.WrapperAlive(l.Dir) })
		return l.Dir, reaped
	}
	kept, keptReaped := start()
	stray, strayReaped := start()

	h.m.Sweep(func(id string) bool { return id == filepath.Base(kept) })
	select {
	case <-strayReaped:
	case <-time.After(waitBound):
		t.Fatal("the unrecorded pcwrap was not ended")
	}
	eventually(t, "the unrecorded session removed", func() bool { _, err := os.Lstat(stray); return os.IsNotExist(err) })
	require.True(t, procsession.WrapperAlive(kept), "the kept session runs on")
	select {
	case <-keptReaped:
		t.Fatal("the kept pcwrap ended")
	default:
	}
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	st := h.waitExit(id, 9)
	require.NotNil(t, st.ExitCode, "the terminal runs on to its exit")
	assert.Equal(t, 5, *st.ExitCode)
	require.NoError(t, procsession.StopWrapper(kept))
	select {
	case <-keptReaped:
	case <-time.After(waitBound):
		t.Fatal("the kept pcwrap did not stop")
	}
}

// TestTools12_TerminalOutputBounded: 10 MiB of output (whole characters) keeps the tail
// (cut on a UTF-8 boundary), sets truncated, and memory stays bounded.
func TestTools12_TerminalOutputBounded(t *testing.T) {
	h := newHarness(t)
	limit := int64(100_000) // not a multiple of the 3-byte pattern: the cut lands mid-character
	res, err := h.m.Create(CreateRequest{SessionID: sess, Command: "sh",
		Args:            []string{"-c", `yes 'é€' | head -c 10485756; echo; echo END`},
		OutputByteLimit: &limit}, h.state, h.env())
	require.NoError(t, err)
	id := res.TerminalID
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	st := h.waitExit(id, 1)
	require.NotNil(t, st.ExitCode)
	eventually(t, "END", func() bool { return strings.HasSuffix(h.output(id).Output, "END\n") })
	out := h.output(id)
	assert.True(t, out.Truncated)
	assert.LessOrEqual(t, len(out.Output), int(limit))
	assert.GreaterOrEqual(t, len(out.Output), int(limit)-utf8.UTFMax)
	assert.True(t, utf8.ValidString(out.Output), "cut on a character boundary")
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	assert.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(8<<20), "heap grows by far less than the output")
	fi, err := os.Stat(filepath.Join(h.state, Dir, id+tailSuffix))
	require.NoError(t, err)
	assert.LessOrEqual(t, fi.Size(), limit+maxHeaderBytes)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// TestTools12_TerminalLimit: the 17th open terminal of a session is
// refused; releasing one makes room.
func TestTools12_TerminalLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var ids []string
	for range maxOpen {
		ids = append(ids, h.create(`sleep 300`))
	}
	_, err := h.m.Create(CreateRequest{SessionID: sess, Command: "true"}, h.state, h.env())
	var te *Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, codeInvalidParams, te.Code)
	require.NoError(t, h.m.Release(Request{SessionID: sess, TerminalID: ids[0]}))
	h.create(`true`)
}

// TestTerminalEnvAndCwd: params.env reaches the command beside the
// allowlisted env, cwd is honoured, and a PAPERCLIP_ name is refused.
func TestTerminalEnvAndCwd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dir := t.TempDir()
	res, err := h.m.Create(CreateRequest{SessionID: sess, Command: "sh", Args: []string{"-c", `echo "$FOO:$(pwd)"`},
		Env: []envVariable{{Name: "FOO", Value: "bar"}}, Cwd: dir}, h.state, h.env())
	require.NoError(t, err)
	h.waitExit(res.TerminalID, 1)
	assert.Equal(t, "bar:"+dir+"\n", h.output(res.TerminalID).Output)

	_, err = DecodeCreate(json.RawMessage(`{"sessionId":"s","command":"sh","env":[{"name":"PAPERCLIP_X","value":"1"}]}`))
	var te *Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, codeInvalidParams, te.Code)
	_, err = h.m.Output(Request{SessionID: "other", TerminalID: res.TerminalID})
	require.ErrorAs(t, err, &te)
	assert.Equal(t, CodeResourceNotFound, te.Code, "another session's terminal is unknown")
}

func TestKeepTail(t *testing.T) {
	tail, cut := keepTail(nil, []byte("abc"), 5, false)
	assert.Equal(t, "abc", string(tail))
	assert.False(t, cut)
	tail, cut = keepTail(tail, []byte("déf"), 5, false) // 7 bytes: the last 5 are "cdéf"
	assert.True(t, cut)
	assert.Equal(t, "cdéf", string(tail))
	tail, cut = keepTail(nil, []byte("aé"), 2, false) // last 2 bytes are é's two bytes
	assert.True(t, cut)
	assert.Equal(t, "é", string(tail))
	tail, cut = keepTail(nil, []byte("a€"), 2, false) // last 2 bytes start mid-€: dropped
	assert.Empty(t, string(tail))
	tail, _ = keepTail(tail, []byte("\x80b"), 2, cut) // the rest of a character whose start is gone
	assert.Equal(t, "b", string(tail))
}

// TestTerminalOOMScoreAdj: a client terminal's command starts with
// pcwrap's OOM policy (oom_score_adj 500, not runnerd's), so under
// memory pressure the kernel picks it before runnerd or pcwrap.
func TestTerminalOOMScoreAdj(t *testing.T) {
	t.Parallel()
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	require.NoError(t, err)
	if n, _ := strconv.Atoi(strings.TrimSpace(string(own))); n > 500 {
		t.Skipf("this process's oom_score_adj %d is above the policy's 500", n)
	}
	h := newHarness(t)
	id := h.create(`cat /proc/self/oom_score_adj`)
	h.waitExit(id, 1)
	assert.Equal(t, "500\n", h.output(id).Output)
	after, err := os.ReadFile("/proc/self/oom_score_adj")
	require.NoError(t, err)
	assert.Equal(t, string(own), string(after), "runnerd keeps its own")
}

// TestTerminalSetsidJobEndsAtRelease: a background job that left the
// terminal's process group by setsid still ends at release.
func TestTerminalSetsidJobEndsAtRelease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	id := h.create(`setsid sh -c 'echo $$ > ` + pidFile + `; exec sleep 300' </dev/null >/dev/null 2>&1 & echo hi`)
	h.waitExit(id, 1)
	var pid int
	eventually(t, "the job's pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	require.NoError(t, syscall.Kill(pid, 0), "the job runs after its leader exited")
	require.NoError(t, h.m.Release(Request{SessionID: sess, TerminalID: id}))
	eventually(t, "the setsid job to end", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}
