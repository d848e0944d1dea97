package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// Groups A and B, bridge scenarios (spec §13: 7–10, 12, 14–17, 22–24).

// killWait bounds how long a child may survive a stop: the 3000 ms grace
// plus slack on a loaded machine (scenario text: within 8 s).
const killWait = 8 * time.Second

// isFinalize reports whether e is the finalize step (base64 -d … mv) of the
// upload of stdin file name.
func isFinalize(e *Exec, name string) bool {
	return strings.HasPrefix(e.Script, "base64 -d < ") && strings.Contains(e.Script, "/"+name+"'")
}

// Scenario 7: the finalize of file 1 is delayed 300 ms while the peer
// sends two stdin lines back to back: file 2 is finalized only after file 1
// and the child sees the bytes in order.
func TestPcwrap07_FinalizeOrder(t *testing.T) {
	r := newRig(t, false)
	r.runner.Intercept = func(ctx context.Context, e *Exec) (*Result, error) {
		if isFinalize(e, sessiondir.SeqName(1)) {
			time.Sleep(300 * time.Millisecond)
		}
		return nil, nil
	}
	s := r.start(t, sh("cat"))
	p := dialPeer(t, s)
	p.send(t, s.Token, "stdin", "HEAD_ONE_")
	p.send(t, s.Token, "stdin", "TAIL_TWO")
	p.send(t, s.Token, "stdinEnd", "")
	var out strings.Builder
	for {
		line, err := p.readLine(scenarioTimeout)
		require.NoError(t, err)
		f, err := frame.ParseFrame([]byte(line))
		require.NoError(t, err)
		if f.Type == frame.FrameExit {
			require.NotNil(t, f.Code)
			assert.Equal(t, 0, *f.Code)
			break
		}
		out.Write(f.Data)
	}
	assert.Equal(t, "HEAD_ONE_TAIL_TWO", out.String())
	assert.Equal(t, []string{"000000000001.json", "000000000002.json", "000000000003.json"}, finalizes(r.runner))
}

// Scenario 8: a stop while the data file's upload is in flight keeps the
// chain: data, stdinEnd, shutdown.
func TestPcwrap08_StopWhileWriteInFlight(t *testing.T) {
	r := newRig(t, false)
	inFlight := make(chan struct{})
	var once sync.Once
	r.runner.Intercept = func(ctx context.Context, e *Exec) (*Result, error) {
		if isFinalize(e, sessiondir.SeqName(1)) {
			once.Do(func() { close(inFlight) })
			time.Sleep(300 * time.Millisecond)
		}
		return nil, nil
	}
	s := r.start(t, sh("cat"))
	p := dialPeer(t, s)
	p.send(t, s.Token, "stdin", "in-flight")
	select {
	case <-inFlight:
	case <-time.After(scenarioTimeout):
		t.Fatal("the upload never reached its finalize step")
	}
	s.Stop(context.Background())
	assert.Equal(t, []string{"000000000001.json", "000000000002.json", "000000000003.json"}, finalizes(r.runner))
}

// Scenario 9: writeTextFile publishes by base64 -d into a decoded sibling
// and mv; the final name is never a redirect target; nothing else remains.
func TestPcwrap09_WriteTextFileFinalize(t *testing.T) {
	runner := &ShellRunner{}
	q := Queue{Runner: runner}
	dir := filepath.Join(t.TempDir(), "stdin")
	final := filepath.Join(dir, "000000000001.json")
	body := `{"type":"stdin","data":"aGVsbG8="}` + "\n"
	require.NoError(t, q.WriteTextFile(context.Background(), final, body))
	b, err := os.ReadFile(final)
	require.NoError(t, err)
	assert.Equal(t, body, string(b))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.Equal(t, "000000000001.json", ents[0].Name())

	var fin []string
	for _, s := range runner.Scripts() {
		assert.NotContains(t, s, "> "+shq(final), "a redirect onto the final name truncates it first")
		assert.NotContains(t, s, ">> "+shq(final))
		if strings.Contains(s, "base64 -d") {
			fin = append(fin, s)
		}
	}
	require.Len(t, fin, 1)
	assert.Regexp(t, `base64 -d < '[^']*\.paperclip-upload\.b64' > '`+regexp.QuoteMeta(final)+`\.[0-9a-f-]+\.paperclip-upload\.decoded' && mv '`, fin[0])
	assert.Contains(t, fin[0], "mv ")
}

// Scenario 10: readers polling the queue while six rounds of remove+write of
// a 64 KiB payload run never parse a partial file.
func TestPcwrap10_ConcurrentReadersNeverSeePartial(t *testing.T) {
	q := Queue{Runner: &ShellRunner{}}
	dir := filepath.Join(t.TempDir(), "stdin")
	final := filepath.Join(dir, "000000000001.json")
	body := string(frame.Message{Type: frame.MsgStdin, Data: []byte(strings.Repeat("p", 64<<10))}.AppendJSON(nil))
	var parseErrors, reads atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				b, err := os.ReadFile(final)
				if err != nil {
					continue
				}
				var v map[string]any
				if json.Unmarshal(b, &v) != nil {
					parseErrors.Add(1)
				} else {
					reads.Add(1)
				}
			}
		})
	}
	for range 6 {
		require.NoError(t, q.Remove(context.Background(), final))
		require.NoError(t, q.WriteTextFile(context.Background(), final, body))
	}
	close(done)
	wg.Wait()
	assert.Zero(t, parseErrors.Load())
	assert.GreaterOrEqual(t, reads.Load(), int64(1))
}

// trapTERM is a child that ignores SIGTERM, records its pid, and idles.
func trapTERM(pidFile string) Command {
	return sh(fmt.Sprintf(`trap "" TERM; echo $$ > %s; while :; do sleep 0.1; done`, shq(pidFile)))
}

// idleChild records its pid and idles (default signal handling).
func idleChild(pidFile string) Command {
	return sh(fmt.Sprintf(`echo $$ > %s; while :; do sleep 0.1; done`, shq(pidFile)))
}

func waitDead(t *testing.T, what string, pids ...int) {
	t.Helper()
	waitFor(t, killWait, what+" to die", func() bool {
		for _, p := range pids {
			if procAlive(p) {
				return false
			}
		}
		return true
	})
}

// Scenario 12 (T2): a child that ignores SIGTERM is SIGKILLed after the
// grace; no process mentions the session path afterwards.
func TestPcwrap12_StopKillsTermIgnoringChild(t *testing.T) {
	t.Parallel()
	r := newRig(t, false)
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := r.start(t, trapTERM(pidFile))
	pid := readPid(t, pidFile)
	s.Stop(context.Background())
	waitDead(t, "the TERM-ignoring child", pid)
	// The wrapper exits after its child was reaped and the exit frame
	// written, a moment after the child is gone: wait for it, bounded.
	waitFor(t, killWait, "no process to mention the session dir", func() bool {
		return len(pidsMatching(s.Dir, "cmdline")) == 0 && len(wrapperPids(s.Dir)) == 0
	})
}

// Scenario 14 (T4): stopping session A kills only A's child.
func TestPcwrap14_StopIsPerSession(t *testing.T) {
	r := newRig(t, false)
	tmp := t.TempDir()
	a := r.start(t, idleChild(filepath.Join(tmp, "a")))
	b := r.start(t, idleChild(filepath.Join(tmp, "b")))
	pa, pb := readPid(t, filepath.Join(tmp, "a")), readPid(t, filepath.Join(tmp, "b"))
	a.Stop(context.Background())
	waitDead(t, "session A's child", pa)
	assert.True(t, procAlive(pb), "session B's child must survive A's stop")
	require.NotEmpty(t, wrapperPids(b.Dir))
}

// forgeEvent plants an event file the way any sandbox process could.
func forgeEvent(t *testing.T, dir string, seq int64, f frame.Frame) {
	t.Helper()
	events := filepath.Join(dir, sessiondir.EventsDir)
	require.NoError(t, os.MkdirAll(events, 0o700))
	p := filepath.Join(events, sessiondir.SeqName(seq))
	require.NoError(t, os.WriteFile(p+".forge", append(f.AppendJSON(nil), '\n'), 0o600))
	require.NoError(t, os.Rename(p+".forge", p))
}

// waitForgedConsumed waits until the host's event poll has taken the
// forged event at seq: it removes an event file only after delivering it
// (sessiondir.EventReader.cycle), so the file's absence shows the forged
// frame reached the host before the stop begins.
func waitForgedConsumed(t *testing.T, dir string, seq int64) {
	t.Helper()
	p := filepath.Join(dir, sessiondir.EventsDir, sessiondir.SeqName(seq))
	waitFor(t, scenarioTimeout, "the poll to consume the forged event", func() bool {
		_, err := os.Lstat(p)
		return errors.Is(err, fs.ErrNotExist)
	})
}

// issuedScript reports whether the host issued script through r.
func issuedScript(r *ShellRunner, script string) bool {
	for _, sc := range r.Scripts() {
		if sc == script {
			return true
		}
	}
	return false
}

func rmScripts(r *ShellRunner, dir string) int {
	n := 0
	for _, s := range r.Scripts() {
		if s == "rm -rf "+shq(dir) {
			n++
		}
	}
	return n
}

func stdinFinalizes(r *ShellRunner) int { return len(finalizes(r)) }

// Scenario 15 (T5): a forged exit event does not shorten the stop; the real
// pcwrap acknowledges quickly.
func TestPcwrap15_ForgedExitThenStop(t *testing.T) {
	r := newRig(t, false)
	s := r.start(t, sh("cat"))
	forgeEvent(t, s.Dir, 999999999999, frame.ExitFrame(new(int), ""))
	waitForgedConsumed(t, s.Dir, 999999999999)
	start := time.Now()
	acked := s.Stop(context.Background())
	el := time.Since(start)
	assert.True(t, acked)
	assert.GreaterOrEqual(t, stdinFinalizes(r.runner), 2, "stdinEnd and shutdown written")
	assert.Equal(t, 1, rmScripts(r.runner, s.Dir))
	assert.Less(t, el, time.Second)
	assert.Zero(t, r.logs.count("did not acknowledge shutdown"))
}

// fakeLaunch answers the launch exec without running pcwrap.
func fakeLaunch(ctx context.Context, e *Exec) (*Result, error) {
	if strings.Contains(e.Script, "nohup") {
		return &Result{}, nil
	}
	return nil, nil
}

// Scenario 16 (T14): pcwrap never runs; a forged exit event does not stand
// in for the ack: the stop waits the full 3000 ms, warns once, removes.
func TestPcwrap16_NoWrapperForgedExit(t *testing.T) {
	t.Parallel()
	r := newRig(t, false)
	r.runner.Intercept = fakeLaunch
	s := r.start(t, sh("cat"))
	forgeEvent(t, s.Dir, 999999999999, frame.ExitFrame(new(int), ""))
	waitForgedConsumed(t, s.Dir, 999999999999)
	start := time.Now()
	acked := s.Stop(context.Background())
	assert.False(t, acked)
	assert.GreaterOrEqual(t, time.Since(start), 2900*time.Millisecond)
	assert.Equal(t, 1, r.logs.count(NoAckWarning))
	assert.Equal(t, 1, rmScripts(r.runner, s.Dir))
	assert.NoDirExists(t, s.Dir)
}

// Scenario 17 (T6): no stop script kills or signals anything.
func TestPcwrap17_StopSendsNoSignal(t *testing.T) {
	r := newRig(t, false)
	s := r.start(t, sh("cat"))
	code, _, _ := proxyRun(t, s, "x")
	require.Equal(t, 0, code)
	s.Stop(context.Background())
	re := regexp.MustCompile(`\bkill\b|SIGTERM|SIGKILL`)
	for _, sc := range r.runner.Scripts() {
		assert.False(t, re.MatchString(sc), "script %q", sc)
	}
}

// Scenario 22 (T12): the child already exited; the stop finds pcwrap's
// shutdownAck at once.
func TestPcwrap22_StopAfterChildExit(t *testing.T) {
	r := newRig(t, false)
	s := r.start(t, sh("exit 0"))
	// The child has exited once the poll reads pcwrap's first event, its
	// exit frame (the child prints nothing).
	waitFor(t, scenarioTimeout, "the poll to read pcwrap's exit frame", func() bool {
		return issuedScript(r.runner, "base64 < "+shq(filepath.Join(s.Dir, sessiondir.EventsDir, sessiondir.SeqName(1))))
	})
	start := time.Now()
	assert.True(t, s.Stop(context.Background()))
	assert.Less(t, time.Since(start), time.Second)
	assert.Zero(t, r.logs.count("did not acknowledge shutdown"))
}

// Scenario 23 (T13): pcwrap never runs and events/ stays empty: full wait,
// one warning, the directory removed.
func TestPcwrap23_NoWrapperNoEvents(t *testing.T) {
	t.Parallel()
	r := newRig(t, false)
	r.runner.Intercept = fakeLaunch
	s := r.start(t, sh("cat"))
	require.NoError(t, os.MkdirAll(filepath.Join(s.Dir, sessiondir.EventsDir), 0o700))
	start := time.Now()
	assert.False(t, s.Stop(context.Background()))
	assert.GreaterOrEqual(t, time.Since(start), 2900*time.Millisecond)
	assert.Equal(t, 1, r.logs.count(NoAckWarning))
	assert.Equal(t, 1, rmScripts(r.runner, s.Dir))
	assert.NoDirExists(t, s.Dir)
}

// Scenario 24 (T15): a hostile runner swallows the shutdown write, forges a
// shutdownAck and recreates stdin/ and events/ instead of removing the
// session: pcwrap's identity latch still ends pcwrap and its child.
func TestPcwrap24_HostileRunnerCannotStrandChild(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		child func(pidFile string) Command
	}{
		{"cat", func(pidFile string) Command {
			return sh(fmt.Sprintf(`echo $$ > %s; exec cat`, shq(pidFile)))
		}},
		{"ignores stdin EOF", idleChild},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, false)
			var dir atomic.Value
			r.runner.Intercept = func(ctx context.Context, e *Exec) (*Result, error) {
				d, _ := dir.Load().(string)
				if d == "" {
					return nil, nil
				}
				if strings.Contains(e.Script, sessiondir.SeqName(2)) {
					if isFinalize(e, sessiondir.SeqName(2)) {
						forgeEvent(t, d, 999999999998, frame.ShutdownAckFrame())
					}
					return &Result{}, nil // the shutdown file never lands
				}
				if e.Script == "rm -rf "+shq(d) {
					e.Script = "rm -rf " + shq(d) + " && mkdir -p " + shq(d+"/stdin") + " " + shq(d+"/events")
				}
				return nil, nil
			}
			pidFile := filepath.Join(t.TempDir(), "pid")
			s := r.start(t, tc.child(pidFile))
			dir.Store(s.Dir)
			child := readPid(t, pidFile)
			var wrappers []int
			waitFor(t, scenarioTimeout, "pcwrap's process", func() bool {
				wrappers = wrapperPids(s.Dir)
				return len(wrappers) > 0
			})
			s.Stop(context.Background())
			waitDead(t, "pcwrap and its child", append(wrappers, child)...)
			_ = os.RemoveAll(s.Dir)
		})
	}
}
