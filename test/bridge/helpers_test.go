package bridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

// scenarioTimeout bounds any one scenario's waits.
const scenarioTimeout = 20 * time.Second

// logLines collects the host's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

type rig struct {
	host   *Host
	runner *ShellRunner
	logs   *logLines
}

func newRig(t *testing.T, stream bool) *rig {
	t.Helper()
	root := t.TempDir()
	r := &rig{runner: &ShellRunner{}, logs: &logLines{}}
	// The runtime dir exists before any session: the host syncs its
	// scripts (here: pcwrap would be) into it first (spec §9.1).
	require.NoError(t, os.MkdirAll(filepath.Join(root, "process-sessions"), 0o700))
	r.host = &Host{
		Runner:     r.runner,
		Pcwrap:     testbin.Path(t, "pcwrap"),
		RuntimeDir: filepath.Join(root, "process-sessions"),
		RemoteCwd:  root,
		Stream:     stream,
		Log:        r.logs.add,
	}
	return r
}

// start launches cmd and registers the session's cleanup: a stop (which
// is what ends pcwrap) and the wait for the emulator's goroutines.
func (r *rig) start(t *testing.T, cmd Command) *Session {
	t.Helper()
	s, err := r.host.Start(context.Background(), cmd)
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop(context.Background())
		s.Close()
	})
	return s
}

func sh(script string) Command { return Command{Command: "sh", Args: []string{"-c", script}} }

// proxyRun runs the proxy to completion with the given stdin.
func proxyRun(t *testing.T, s *Session, stdin string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	var o, e bytes.Buffer
	code = RunProxy(ctx, s.Addr, s.Token, strings.NewReader(stdin), &o, &e)
	require.NoError(t, ctx.Err(), "proxy did not finish")
	return code, o.String(), e.String()
}

// finalizes returns the stdin file names in the order their finalize
// script (base64 -d … mv) was issued.
func finalizes(r *ShellRunner) []string {
	var names []string
	for _, s := range r.Scripts() {
		if strings.HasPrefix(s, "base64 -d < ") {
			i := strings.Index(s, " && mv ")
			rest := s[i+len(" && mv "):]
			j := strings.Index(rest, " && rm -f ")
			parts := strings.Fields(rest[:j])
			names = append(names, filepath.Base(strings.Trim(parts[len(parts)-1], "'")))
		}
	}
	return names
}

// procAlive reports whether pid exists and is not a zombie.
func procAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	rest := b[bytes.LastIndexByte(b, ')')+1:]
	f := strings.Fields(string(rest))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// pidsMatching returns live processes whose environ or cmdline contains sub.
func pidsMatching(sub string, file string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil || !bytes.Contains(b, []byte(sub)) {
			continue
		}
		if procAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// wrapperPids finds the pcwrap of a session by its launch env.
func wrapperPids(dir string) []int {
	return pidsMatching("PAPERCLIP_PROCESS_SESSION_DIR="+dir+"\x00", "environ")
}

// readPid waits for a child to write its pid into path.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, scenarioTimeout, "the child's pid file", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// peer is a raw socket on a session's local proxy port.
type peer struct {
	c  net.Conn
	rd *bufio.Reader
}

func dialPeer(t *testing.T, s *Session) *peer {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr, scenarioTimeout)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &peer{c: c, rd: bufio.NewReader(c)}
}

func (p *peer) send(t *testing.T, token, typ, data string) {
	t.Helper()
	m := map[string]string{"token": token, "type": typ}
	if typ == "stdin" {
		m["data"] = base64.StdEncoding.EncodeToString([]byte(data))
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = p.c.Write(append(b, '\n'))
	require.NoError(t, err)
}

func (p *peer) readLine(d time.Duration) (string, error) {
	_ = p.c.SetReadDeadline(time.Now().Add(d))
	return p.rd.ReadString('\n')
}
