package bridge

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
)

// Group C: the bridge's process-session part (spec §13, scenarios 35–43),
// run against the built pcwrap with the host's scripts executed for real.

// Scenario 35: one launch exec creates stdin/ and events/ with a single
// mkdir -p line, together with the nohup launch; no standalone mkdir exec.
func TestPcwrap35_LaunchCreatesDirsWithNohup(t *testing.T) {
	r := newRig(t, false)
	s := r.start(t, sh("cat"))
	execs := r.runner.Execs()
	require.NotEmpty(t, execs)
	launch := execs[0].Script
	assert.Contains(t, launch, "mkdir -p "+shq(filepath.Join(s.Dir, "stdin"))+" "+shq(filepath.Join(s.Dir, "events"))+"\n")
	assert.Contains(t, launch, "nohup "+shq(r.host.Pcwrap)+" >/dev/null 2>&1 < /dev/null &")
	assert.NotContains(t, launch, "$!", "no pid is captured")
	assert.True(t, execs[0].BypassSession)
	assert.Equal(t, "bridge", execs[0].Env["PAPERCLIP_SANDBOX_EXEC_CHANNEL"])
	n := 0
	for _, e := range execs {
		if strings.Contains(e.Script, "nohup") {
			n++
		}
		if strings.HasPrefix(e.Script, "mkdir") && !strings.Contains(e.Script, "nohup") && !strings.Contains(e.Script, "paperclip-upload") {
			t.Errorf("standalone mkdir exec: %q", e.Script)
		}
	}
	assert.Equal(t, 1, n)
	code, out, _ := proxyRun(t, s, "x")
	assert.Equal(t, 0, code)
	assert.Equal(t, "x", out)
}

// Scenario 36, both modes: a PATH in the launch payload equal to the host's
// reaches the child exactly, though the runner gives pcwrap another PATH.
func TestPcwrap36_PayloadPathSurvives(t *testing.T) {
	hostPath := os.Getenv("PATH")
	for _, stream := range []bool{false, true} {
		t.Run(mode(stream), func(t *testing.T) {
			r := newRig(t, stream)
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "PATH=") {
					env = append(env, kv)
				}
			}
			r.runner.Env = append(env, "PATH=/usr/sbin:/usr/bin:/sbin:/bin:/runner-only")
			cmd := sh(`printf %s "$PATH"`)
			cmd.Env = map[string]string{"PATH": hostPath}
			s := r.start(t, cmd)
			code, out, _ := proxyRun(t, s, "")
			assert.Equal(t, 0, code)
			assert.Equal(t, hostPath, out)
		})
	}
}

func mode(stream bool) string {
	if stream {
		return "stdout"
	}
	return "events"
}

// echoPrefixes: scenario 37's child.
const echoPrefixes = `read line; echo "out:$line"; echo "err:$line" >&2`

func check37(t *testing.T, stream bool) {
	r := newRig(t, stream)
	s := r.start(t, sh(echoPrefixes))
	code, out, errOut := proxyRun(t, s, "hello\n")
	assert.Equal(t, 0, code)
	assert.Equal(t, "out:hello\n", out)
	assert.Equal(t, "err:hello\n", errOut)
	assertNoEventsDir(t, s, stream)
}

func check38(t *testing.T, stream bool) {
	r := newRig(t, stream)
	s := r.start(t, sh(`echo early-out; echo early-err >&2; sleep 0.02`))
	waitBufferedExit(t, s) // the proxy connects late: after the child is gone (scenario text)
	code, out, errOut := proxyRun(t, s, "")
	assert.Equal(t, 0, code)
	assert.Equal(t, "early-out\n", out, "buffered output delivered exactly once")
	assert.Equal(t, "early-err\n", errOut)
	assertNoEventsDir(t, s, stream)
}

func check39(t *testing.T, stream bool) {
	r := newRig(t, stream)
	s := r.start(t, sh(`printf 'line1\nline2\n'; printf 'tail'`))
	code, out, _ := proxyRun(t, s, "")
	assert.Equal(t, 0, code)
	assert.Equal(t, "line1\nline2\ntail", out)
	assertNoEventsDir(t, s, stream)
}

func check41(t *testing.T, stream bool) {
	r := newRig(t, stream)
	s := r.start(t, sh(`while read l; do if [ "$l" = finish ]; then exit 0; fi; echo "delta:$l"; echo "trace:$l" >&2; done`))
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	in, inW := io.Pipe()
	var out, errOut syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- RunProxy(ctx, s.Addr, s.Token, in, &out, &errOut) }()
	_, err := inW.Write([]byte("ping\n"))
	require.NoError(t, err)
	waitFor(t, scenarioTimeout, "live delta and trace", func() bool {
		return out.String() == "delta:ping\n" && errOut.String() == "trace:ping\n"
	})
	select {
	case <-done:
		t.Fatal("the proxy ended before finish was sent")
	default:
	}
	_, err = inW.Write([]byte("finish\n"))
	require.NoError(t, err)
	inW.Close()
	assert.Equal(t, 0, <-done)
	assertNoEventsDir(t, s, stream)
}

// waitBufferedExit waits until the host holds the child's exit frame for
// a proxy that has not connected yet: all the child's output was produced
// and buffered.
func waitBufferedExit(t *testing.T, s *Session) {
	t.Helper()
	waitFor(t, scenarioTimeout, "the exit frame buffered for the proxy", func() bool {
		s.out.mu.Lock()
		defer s.out.mu.Unlock()
		for _, l := range s.out.buf {
			if f, err := frame.ParseFrame(bytes.TrimSuffix(l, []byte("\n"))); err == nil && f.Type == frame.FrameExit {
				return true
			}
		}
		return false
	})
}

func assertNoEventsDir(t *testing.T, s *Session, stream bool) {
	t.Helper()
	if stream {
		assert.NoDirExists(t, filepath.Join(s.Dir, sessiondir.EventsDir), "stdout mode never creates events/")
	}
}

// Scenario 37: echo child with out:/err: prefixes.
func TestPcwrap37_EchoOutAndErr(t *testing.T) { check37(t, false) }

// Scenario 38: early output, child gone after 20 ms, proxy connects after
// 300 ms: both buffered outputs arrive.
func TestPcwrap38_EarlyOutputBuffered(t *testing.T) { check38(t, false) }

// Scenario 39: a child that writes and exits at once.
func TestPcwrap39_ImmediateExit(t *testing.T) { check39(t, false) }

// Scenario 41: live streaming before the child exits.
func TestPcwrap41_LiveStreaming(t *testing.T) { check41(t, false) }

// Scenario 42: stdout mode repeats 37–39 and 41 (the seq guard delivers
// early output once) and never creates events/.
func TestPcwrap42_StdoutModeRepeats(t *testing.T) {
	t.Run("37", func(t *testing.T) { check37(t, true) })
	t.Run("38", func(t *testing.T) { check38(t, true) })
	t.Run("39", func(t *testing.T) { check39(t, true) })
	t.Run("41", func(t *testing.T) { check41(t, true) })
}

// Scenario 40: an idle unauthenticated socket receives nothing; a peer with
// a wrong token is disconnected; the real proxy still gets the buffered
// output.
func TestPcwrap40_ProxyAuthentication(t *testing.T) {
	r := newRig(t, false)
	s := r.start(t, sh(`echo buffered`))

	idle := dialPeer(t, s)
	wrong := dialPeer(t, s)
	wrong.send(t, "wrong-token-wrong-token1", "hello", "")
	_, err := wrong.readLine(2 * time.Second)
	assert.ErrorIs(t, err, io.EOF, "a wrong token is disconnected")

	waitBufferedExit(t, s) // output is produced and buffered meanwhile
	code, out, _ := proxyRun(t, s, "")
	assert.Equal(t, 0, code)
	assert.Equal(t, "buffered\n", out)

	_, err = idle.readLine(100 * time.Millisecond)
	assert.False(t, err == nil, "the idle unauthenticated socket received nothing")
	assert.NotErrorIs(t, err, io.EOF, "and is still open within the 5000 ms auth window")
}

// Scenario 43: stdout mode: exactly one exec (the pcwrap command) uses the
// session; every other exec bypasses it.
func TestPcwrap43_OnlyWrapperExecUsesSession(t *testing.T) {
	r := newRig(t, true)
	s := r.start(t, sh(echoPrefixes))
	code, _, _ := proxyRun(t, s, "hi\n")
	require.Equal(t, 0, code)
	s.Stop(context.Background())
	use := 0
	for _, e := range r.runner.Execs() {
		if e.UseSession {
			use++
			assert.Equal(t, StreamLaunchScript(r.host.Pcwrap), e.Script)
			assert.False(t, e.BypassSession)
			continue
		}
		assert.True(t, e.BypassSession, "exec %q must bypass the session", e.Script)
	}
	assert.Equal(t, 1, use)
}

// Scenario 44 (telemetry spans sandbox.agentSession.sendInput/pollOutput,
// sandbox.agentProcess) is not ported: it checks the reference host's
// OpenTelemetry wiring, which neither pcwrap nor this emulator has; the
// session-directory contract it exercises is covered by 37–43.

// A payload above 64×1024 base64 characters is staged in command.b64 (spec
// §9.1) rather than passed in the environment; pcwrap reads and deletes it
// before the child starts (its side of scenario 62, here via the host path).
func TestBridgeLargePayloadIsStaged(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(mode(stream), func(t *testing.T) {
			r := newRig(t, stream)
			cmd := sh(`printf '%s' "${#BIG}"`)
			cmd.Env = map[string]string{"BIG": strings.Repeat("b", 60<<10)}
			s, err := r.host.Start(context.Background(), Command{Command: cmd.Command, Args: cmd.Args, Env: cmd.Env})
			require.NoError(t, err)
			t.Cleanup(func() { s.Stop(context.Background()); s.Close() })
			code, out, _ := proxyRun(t, s, "")
			assert.Equal(t, 0, code)
			assert.Equal(t, "61440", out)
			assert.NoFileExists(t, filepath.Join(s.Dir, sessiondir.CommandFile))
			for _, e := range r.runner.Execs() {
				assert.NotContains(t, e.Env, sessiondir.EnvCommandB64, "staged, not inline")
				assert.NotContains(t, e.Script, sessiondir.EnvCommandB64+"=")
			}
			assert.Contains(t, r.runner.Scripts(), "umask 077 && mkdir -m 700 "+shq(s.Dir))
		})
	}
}
