package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const diagSecret = "opaque-credential-value-0123456789"

func readDiag(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return string(b)
}

// TestDiagnosticsRedactedAndPrivate: the files are created 0600 in a 0700
// directory; every line written (through the writers or os.Stderr) is
// scrubbed of credential env values and credential-shaped strings, and a
// trailing partial line is kept at Close.
func TestDiagnosticsRedactedAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "diag")
	d, err := OpenDiagnostics(dir, []string{"ANTHROPIC_API_KEY=" + diagSecret, "HOME=/home/daytona"})
	require.NoError(t, err)
	fmt.Fprintf(d.Stderr(), "log line with %s inside\n", diagSecret)
	fmt.Fprint(d.Stderr(), "split across wri")
	fmt.Fprint(d.Stderr(), "tes: Authorization: Bearer abcdefghijklmnop0123456789\n")
	fmt.Fprint(os.Stderr, "paperclip-runnerd: failure mentioning "+diagSecret+"\n")
	fmt.Fprint(d.Stdout(), "no newline at the end")
	require.NoError(t, d.Close())

	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	for _, name := range []string{DiagnosticsStdoutName, DiagnosticsStderrName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), name)
	}
	errLog := readDiag(t, dir, DiagnosticsStderrName)
	require.NotContains(t, errLog, diagSecret)
	require.NotContains(t, errLog, "abcdefghijklmnop0123456789")
	require.Contains(t, errLog, "log line with [REDACTED] inside\n")
	require.Contains(t, errLog, "split across writes: Authorization: [REDACTED]\n")
	require.Contains(t, errLog, "paperclip-runnerd: failure mentioning [REDACTED]\n", "os.Stderr is captured")
	require.Equal(t, "no newline at the end\n", readDiag(t, dir, DiagnosticsStdoutName))
}

// TestDiagnosticsRedactProxyUserinfo: a proxy URL's user:password never
// reaches the diagnostics files, whether the URL or only the password is
// printed.
func TestDiagnosticsRedactProxyUserinfo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "diag")
	d, err := OpenDiagnostics(dir, []string{"HTTPS_PROXY=http://bob:proxy-pass-0123@proxy:3128", "NO_PROXY=localhost"})
	require.NoError(t, err)
	fmt.Fprint(d.Stderr(), "dial http://bob:proxy-pass-0123@proxy:3128 failed\n")
	fmt.Fprint(d.Stderr(), "password proxy-pass-0123\n")
	fmt.Fprint(d.Stderr(), "no_proxy localhost\n")
	require.NoError(t, d.Close())
	errLog := readDiag(t, dir, DiagnosticsStderrName)
	require.NotContains(t, errLog, "proxy-pass-0123")
	require.Contains(t, errLog, "no_proxy localhost\n", "a proxy value without userinfo is no secret")
}

// TestDiagnosticsBounded: a file never passes maxDiagnosticsLogBytes; the
// newest lines survive behind a marker.
func TestDiagnosticsBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "diag")
	d, err := OpenDiagnostics(dir, nil)
	require.NoError(t, err)
	line := strings.Repeat("x", 1000)
	for i := range 3 * maxDiagnosticsLogBytes / 1000 {
		fmt.Fprintf(d.Stderr(), "%06d %s\n", i, line)
	}
	last := fmt.Sprintf("%06d %s\n", 3*maxDiagnosticsLogBytes/1000-1, line)
	require.NoError(t, d.Close())
	got := readDiag(t, dir, DiagnosticsStderrName)
	require.LessOrEqual(t, len(got), maxDiagnosticsLogBytes)
	require.True(t, strings.HasPrefix(got, droppedMarker))
	require.True(t, strings.HasSuffix(got, last))
}

// TestDiagnosticsRefusesUnsafePaths: a symlinked directory, a directory
// others can read, and a symlink planted at a log name are refused, and the
// symlink's target is left untouched.
func TestDiagnosticsRefusesUnsafePaths(t *testing.T) {
	orig := os.Stderr
	base := t.TempDir()
	real := filepath.Join(base, "real")
	require.NoError(t, os.Mkdir(real, 0o700))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(real, link))
	_, err := OpenDiagnostics(link, nil)
	require.ErrorContains(t, err, "symlink")

	open := filepath.Join(base, "open")
	require.NoError(t, os.Mkdir(open, 0o755))
	require.NoError(t, os.Chmod(open, 0o755))
	_, err = OpenDiagnostics(open, nil)
	require.ErrorContains(t, err, "group or other")

	target := filepath.Join(base, "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(real, DiagnosticsStderrName)))
	_, err = OpenDiagnostics(real, nil)
	require.ErrorContains(t, err, "symlink")
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "keep", string(b))
	require.Same(t, orig, os.Stderr, "os.Stderr untouched on failure")
}

// BenchmarkDiagnosticsLogLine is the cost of one typical JSON log line
// through the redacting, bounded diagnostics writer (with a dozen credential
// values to scrub), file write included.
func BenchmarkDiagnosticsLogLine(b *testing.B) {
	env := make([]string, 12)
	for i := range env {
		env[i] = fmt.Sprintf("SECRET_%d_TOKEN=value-%d-0123456789abcdef", i, i)
	}
	d, err := OpenDiagnostics(filepath.Join(b.TempDir(), "diag"), env)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	line := []byte(`{"time":"2026-11-30T13:23:57.567138785Z","level":"INFO","msg":"executing command","component":"runnerd","commandId":"command_prp_00000199","type":"runner.drain","controllerSeq":199}` + "\n")
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		_, _ = d.Stderr().Write(line)
	}
}
