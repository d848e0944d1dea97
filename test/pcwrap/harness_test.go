// Package pcwrap_test runs the built pcwrap binary against real session
// directories: the conformance scenarios of spec pcwrap-protocol.md §13
// that belong to the wrapper itself.
package pcwrap_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) {
	runCatcherIfAsked()
	goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit))
}

// hookTag selects the test-hook build of pcwrap.
const hookTag = testbin.HooksTag

// waitBound bounds every wait on pcwrap in these tests; the scenarios'
// own bounds (4 s, 10 s) are tighter where they matter.
const waitBound = 15 * time.Second

// payload is the command payload of spec §2.3.
type payload struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

func (p payload) b64(t testing.TB) string {
	b, err := json.Marshal(p)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

// opts describe one pcwrap launch.
type opts struct {
	mode      string // "events" or "stdout"
	payload   payload
	env       []string // extra env
	tags      []string // build tags
	dir       string   // session dir; default a fresh temp dir
	noMkdir   bool     // do not pre-create stdin/ and events/
	stagePayl bool     // stage command.b64 instead of the env var
	args      []string // extra pcwrap args
	stdin     *os.File
	wrapper   []string // run pcwrap under this command (e.g. nohup)
	stdout    *os.File // pcwrap's stdout instead of the frame reader
	cred      *syscall.Credential
	bin       string // the pcwrap binary; default the one testbin built
}

// session is a running pcwrap.
type session struct {
	t      testing.TB
	dir    string
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer

	mu    sync.Mutex
	lines []frame.Frame // stdout mode
	raw   []string
	done  chan struct{}
	code  int
	state *os.ProcessState
	outWG sync.WaitGroup
}

func catPayload() payload { return payload{Command: "cat", Args: []string{}} }

// start launches pcwrap per o and registers cleanup (kill + wait).
func start(t testing.TB, o opts) *session {
	t.Helper()
	bin := o.bin
	if bin == "" {
		bin = testbin.Path(t, "pcwrap", o.tags...)
	}
	dir := o.dir
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "session")
	}
	if !o.noMkdir {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "stdin"), 0o700))
		if o.mode != "stdout" {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "events"), 0o700))
		}
	}
	if o.payload.Command == "" {
		o.payload = catPayload()
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "PAPERCLIP_PROCESS_SESSION_DIR=" + dir}
	if o.stagePayl {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "command.b64"), []byte(o.payload.b64(t)), 0o600))
	} else {
		env = append(env, "PAPERCLIP_PROCESS_SESSION_COMMAND_B64="+o.payload.b64(t))
	}
	env = append(env, o.env...)
	args := append([]string{}, o.args...)
	if o.mode != "" {
		args = append(args, "--output="+o.mode)
	}
	argv := append(append(append([]string{}, o.wrapper...), bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: o.cred}
	s := &session{t: t, dir: dir, cmd: cmd, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	if o.stdin != nil {
		cmd.Stdin = o.stdin
	}
	if o.stdout != nil {
		cmd.Stdout = o.stdout
		require.NoError(t, cmd.Start())
	} else {
		s.readStdout(t, cmd)
	}
	go func() {
		s.outWG.Wait()
		err := cmd.Wait()
		s.code = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			s.code = ee.ExitCode()
			s.state = ee.ProcessState
		}
		close(s.done)
	}()
	t.Cleanup(func() {
		// A SIGKILLed pcwrap leaves its cgroup: end it as runnerd does.
		// The record may appear only now (written just after the spawn),
		// or be gone with a removed session dir: look before and after.
		cg := recordedCgroup(dir)
		select {
		case <-s.done:
		default:
			_ = cmd.Process.Kill()
			<-s.done
		}
		if cg == "" {
			cg = recordedCgroup(dir)
		}
		cleanupCgroup(cg)
	})
	return s
}

// readStdout starts cmd and parses its stdout lines as frames.
func (s *session) readStdout(t testing.TB, cmd *exec.Cmd) {
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s.outWG.Add(1)
	go func() {
		defer s.outWG.Done()
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			line := sc.Text()
			f, err := frame.ParseFrame([]byte(line))
			s.mu.Lock()
			s.raw = append(s.raw, line)
			if err == nil {
				s.lines = append(s.lines, f)
			}
			s.mu.Unlock()
		}
	}()
}

// wait waits for pcwrap to exit within d and returns its status.
func (s *session) wait(d time.Duration) int {
	s.t.Helper()
	select {
	case <-s.done:
		return s.code
	case <-time.After(d):
		s.t.Fatalf("pcwrap did not exit within %v; stderr: %s", d, s.stderr.String())
		return -1
	}
}

func (s *session) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stdinPath returns the path of queue file seq.
func (s *session) stdinPath(seq int64) string {
	return filepath.Join(s.dir, "stdin", sessiondir.SeqName(seq))
}

// put publishes queue file seq atomically (temp + rename).
func (s *session) put(seq int64, body string) {
	s.t.Helper()
	tmp := s.stdinPath(seq) + ".tmp-upload"
	require.NoError(s.t, os.WriteFile(tmp, []byte(body), 0o600))
	require.NoError(s.t, os.Rename(tmp, s.stdinPath(seq)))
}

// putRaw writes queue file seq in place (not atomic), as a bad writer does.
func (s *session) putRaw(seq int64, body string) {
	s.t.Helper()
	require.NoError(s.t, os.WriteFile(s.stdinPath(seq), []byte(body), 0o600))
}

func stdinMsg(data string) string {
	return `{"type":"stdin","data":"` + base64.StdEncoding.EncodeToString([]byte(data)) + `"}` + "\n"
}

const (
	stdinEndMsg = `{"type":"stdinEnd"}` + "\n"
	shutdownMsg = `{"type":"shutdown"}` + "\n"
)

// frames returns the frames seen so far: stdout lines in stdout mode,
// else the event files (read, not removed) in seq order.
func (s *session) frames() []frame.Frame {
	s.mu.Lock()
	lines := append([]frame.Frame(nil), s.lines...)
	s.mu.Unlock()
	if len(lines) > 0 {
		return lines
	}
	return readEvents(s.t, s.dir)
}

func readEvents(t testing.TB, dir string) []frame.Frame {
	ents, err := os.ReadDir(filepath.Join(dir, "events"))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []frame.Frame
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, "events", n))
		if err != nil {
			continue
		}
		f, err := frame.ParseFrame(bytes.TrimSuffix(b, []byte("\n")))
		if err == nil {
			seq, _ := sessiondir.ParseSeq(n)
			f.Seq = seq
			out = append(out, f)
		}
	}
	return out
}

// output concatenates the data frames of stream.
func output(fr []frame.Frame, stream string) string {
	var b strings.Builder
	for _, f := range fr {
		if f.Type == frame.FrameData && f.Stream == stream {
			b.Write(f.Data)
		}
	}
	return b.String()
}

func count(fr []frame.Frame, typ string) int {
	n := 0
	for _, f := range fr {
		if f.Type == typ {
			n++
		}
	}
	return n
}

func errorsOf(fr []frame.Frame) []string {
	var out []string
	for _, f := range fr {
		if f.Type == frame.FrameError {
			out = append(out, f.Message)
		}
	}
	return out
}

func hasError(fr []frame.Frame, sub string) bool {
	for _, m := range errorsOf(fr) {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

// eventually polls cond every 10 ms for at most d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFrame waits until a frame satisfying pred was seen.
func (s *session) waitFrame(d time.Duration, what string, pred func([]frame.Frame) bool) {
	s.t.Helper()
	eventually(s.t, d, what, func() bool { return pred(s.frames()) })
}

func (s *session) waitOutput(d time.Duration, want string) {
	s.t.Helper()
	s.waitFrame(d, fmt.Sprintf("stdout %q", want), func(fr []frame.Frame) bool {
		return output(fr, frame.StreamStdout) == want
	})
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// alive reports whether a process with pid exists (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// readPid waits for a file holding a pid and returns it.
func readPid(t testing.TB, path string) int {
	t.Helper()
	var pid int
	eventually(t, 5*time.Second, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		_, err = fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &pid)
		return err == nil && pid > 0
	})
	return pid
}
