package config

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// Diagnostics file names in --diagnostics-directory (prp.md §13; the server
// reads the tail of runnerd.stderr.log after the process ends).
const (
	DiagnosticsStdoutName = "runnerd.stdout.log"
	DiagnosticsStderrName = "runnerd.stderr.log"
	// DiagnosticsPreviousSuffix names the previous process's file
	// (runnerd.stderr.log.1): one generation is kept, so a restart after a
	// crash does not erase the crashed life's log.
	DiagnosticsPreviousSuffix = ".1"
)

// maxDiagnosticsLogBytes bounds each diagnostics file, the kept previous one
// included (runnerd's choice: the
// server reads only the last 64 KiB of runnerd.stderr.log, so 1 MiB keeps
// that tail with a wide margin while a chatty life cannot fill the disk).
const maxDiagnosticsLogBytes = 1 << 20

// maxDiagnosticsLineBytes bounds a partial line held for redaction; a longer
// one is written (redacted) in pieces (runnerd's choice: a log line is far
// shorter).
const maxDiagnosticsLineBytes = 64 << 10

// droppedMarker starts a diagnostics file whose older half was dropped to
// stay within maxDiagnosticsLogBytes.
const droppedMarker = "[earlier diagnostics dropped to stay within the size bound]\n"

// credentialEnvName matches environment variable names whose values are
// credentials (prp.md §13 lists the server's: API keys, OAuth tokens,
// AWS_*, the MCP token, GitHub credentials).
var credentialEnvName = regexp.MustCompile(`(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)|^AWS_|^GH_|^GITHUB_`)

// Diagnostics are runnerd's bounded, redacted runnerd.stdout.log and
// runnerd.stderr.log in --diagnostics-directory (prp.md §13): once opened,
// the process's own stdout and stderr output goes only there (the raw
// streams get nothing), every line scrubbed of credential values from the
// environment and credential-shaped strings, each file kept under
// maxDiagnosticsLogBytes by dropping its older half. The directory must be
// a real directory (never a symlink) that only its owner can access; it is
// created 0700 when missing, and the files 0600, opened without following
// symlinks. The previous process's files are kept once, as
// runnerd.stdout.log.1 and runnerd.stderr.log.1, under the same bound and
// mode.
type Diagnostics struct {
	stdout, stderr *diagLog

	// The captured os.Stderr (the pipe that feeds stderr) and its copier.
	origStderr *os.File
	pipeW      *os.File
	copied     chan struct{}
}

// OpenDiagnostics keeps the previous process's diagnostics files as *.1,
// opens fresh ones for this process's output and redirects os.Stderr through the redacting writer until Close.
// environ gives the credential values to scrub.
func OpenDiagnostics(dir string, environ []string) (*Diagnostics, error) {
	red := provider.NewRedactor(credentialValues(environ)...)
	files, err := openDiagnosticsFiles(dir)
	if err != nil {
		return nil, NewError(CodeRunnerFailed, "open --diagnostics-directory", err)
	}
	d := &Diagnostics{
		stdout: &diagLog{f: files[0], redact: red.String},
		stderr: &diagLog{f: files[1], redact: red.String},
	}
	r, w, err := os.Pipe()
	if err != nil {
		d.stdout.close()
		d.stderr.close()
		return nil, NewError(CodeRunnerFailed, "capture stderr", err)
	}
	d.origStderr, d.pipeW, d.copied = os.Stderr, w, make(chan struct{})
	os.Stderr = w
	go func() {
		defer close(d.copied)
		_, _ = io.Copy(d.stderr, r)
		_ = r.Close()
	}()
	return d, nil
}

// Stdout is the writer for what runnerd would print on stdout.
func (d *Diagnostics) Stdout() io.Writer { return d.stdout }

// Stderr is the writer for what runnerd would print on stderr (its logs
// and the final error line).
func (d *Diagnostics) Stderr() io.Writer { return d.stderr }

// Close restores os.Stderr, drains what was written to it, flushes a
// trailing partial line and closes the files.
func (d *Diagnostics) Close() error {
	os.Stderr = d.origStderr
	_ = d.pipeW.Close()
	<-d.copied
	return errors.Join(d.stdout.close(), d.stderr.close())
}

// credentialValues returns the values of credential-named variables.
func credentialValues(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && v != "" && credentialEnvName.MatchString(k) {
			out = append(out, v)
		}
		if ok {
			out = append(out, acpx.URLUserinfoSecrets(k, v)...) // a proxy URL's user:password
		}
	}
	return out
}

// diagLog is one bounded, redacted file: whole lines are redacted and
// appended; safe for concurrent use.
type diagLog struct {
	// mu guards size, partial, err and the writes to f: Write is called
	// from any goroutine and from the stderr copier.
	mu      sync.Mutex
	f       *os.File
	size    int64
	partial []byte
	redact  func(string) string
	err     error // the first write failure; later writes are dropped
}

// Write redacts and appends every complete line of p and holds a trailing
// partial line (bounded by maxDiagnosticsLineBytes). It never fails: a
// diagnostics problem must not stop the runner.
func (l *diagLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.appendLine(l.partial[:i+1])
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > maxDiagnosticsLineBytes {
		l.appendLine(append(l.partial, '\n'))
		l.partial = nil
	}
	l.partial = bytes.Clone(l.partial) // do not pin the caller-sized buffer
	return len(p), nil
}

// appendLine writes one redacted line, first dropping the file's older half
// when the line would pass the bound. l.mu held.
func (l *diagLog) appendLine(line []byte) {
	if l.err != nil {
		return
	}
	out := []byte(l.redact(string(line)))
	if len(out) > maxDiagnosticsLogBytes/2 {
		out = append(out[:maxDiagnosticsLogBytes/2-1], '\n')
	}
	if l.size+int64(len(out)) > maxDiagnosticsLogBytes {
		l.err = l.dropOlderHalf()
		if l.err != nil {
			return
		}
	}
	n, err := l.f.Write(out)
	l.size += int64(n)
	l.err = err
}

// dropOlderHalf keeps the newest half of the file (from a line start) after
// droppedMarker. l.mu held.
func (l *diagLog) dropOlderHalf() error {
	keep := make([]byte, maxDiagnosticsLogBytes/2)
	n, err := l.f.ReadAt(keep, l.size-int64(len(keep)))
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	keep = keep[:n]
	if i := bytes.IndexByte(keep, '\n'); i >= 0 {
		keep = keep[i+1:]
	}
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	// O_APPEND: writes land at the new end.
	w, err := l.f.Write(append([]byte(droppedMarker), keep...))
	l.size = int64(w)
	return err
}

func (l *diagLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.appendLine(append(l.partial, '\n'))
		l.partial = nil
	}
	return errors.Join(l.err, l.f.Close())
}
