package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// controlCap caps a control command, as the reference queue client does
// (spec §11: queue-client default and control-command cap, 30,000 ms).
const controlCap = 30 * time.Second

// execWaitDelay bounds how long a finished exec's pipes may stay open
// (a backgrounded descendant holding them) before the copy is abandoned.
const execWaitDelay = 2 * time.Second

// Exec is one sandbox exec call as the host issues it.
type Exec struct {
	Script        string            // run as sh -c Script
	Env           map[string]string // overlaid on the runner's environment
	Cwd           string
	Stdin         []byte
	BypassSession bool // a control command outside the run's session
	UseSession    bool // the one long-lived exec of the stdout mode
	Timeout       time.Duration
	// OnLog, when set, receives output chunks as they arrive ("stdout" or
	// "stderr"), the stream mode's onLog.
	OnLog func(stream string, chunk []byte)
}

// Result is a settled exec.
type Result struct {
	ExitCode       int
	Stdout, Stderr []byte
}

// Runner executes sandbox exec calls.
type Runner interface {
	Run(ctx context.Context, e Exec) (Result, error)
}

// ShellRunner runs every exec for real with /bin/sh -c and records it.
// Intercept, when set, sees each exec first: it may rewrite the script,
// delay it, or answer it itself (a non-nil Result or an error), which is
// how tests fake a launch or swallow a write.
type ShellRunner struct {
	// Env is the sandbox's base environment (default: this process's).
	Env       []string
	Intercept func(ctx context.Context, e *Exec) (*Result, error)

	mu    sync.Mutex
	execs []Exec
}

// Execs returns every exec issued so far, in order, as the host issued it.
func (r *ShellRunner) Execs() []Exec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Exec(nil), r.execs...)
}

// Scripts returns the scripts of Execs.
func (r *ShellRunner) Scripts() []string {
	var s []string
	for _, e := range r.Execs() {
		s = append(s, e.Script)
	}
	return s
}

// Run implements Runner.
func (r *ShellRunner) Run(ctx context.Context, e Exec) (Result, error) {
	r.mu.Lock()
	r.execs = append(r.execs, e)
	r.mu.Unlock()
	if r.Intercept != nil {
		res, err := r.Intercept(ctx, &e)
		if res != nil || err != nil {
			if res == nil {
				res = &Result{}
			}
			return *res, err
		}
	}
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", e.Script)
	cmd.Dir = e.Cwd
	env := r.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append([]string(nil), env...)
	for k, v := range e.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = bytes.NewReader(e.Stdin)
	cmd.WaitDelay = execWaitDelay
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &logWriter{buf: &stdout, stream: "stdout", onLog: e.OnLog}
	cmd.Stderr = &logWriter{buf: &stderr, stream: "stderr", onLog: e.OnLog}
	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
		return res, nil
	case err != nil:
		return res, fmt.Errorf("run exec: %w", err)
	}
	return res, nil
}

// logWriter keeps the full output and feeds each chunk to onLog.
type logWriter struct {
	mu     sync.Mutex
	buf    *bytes.Buffer
	stream string
	onLog  func(string, []byte)
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.onLog != nil {
		w.onLog(w.stream, bytes.Clone(p))
	}
	return len(p), nil
}

var _ io.Writer = (*logWriter)(nil)

// shq quotes s for sh as the reference does: in single quotes, each ' as '\”.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
