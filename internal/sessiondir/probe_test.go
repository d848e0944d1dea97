package sessiondir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func openDir(t *testing.T, p string) *os.File {
	f, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func TestProbePassesAndCleansUp(t *testing.T) {
	if testHooks {
		t.Skip("hook build")
	}
	dir := t.TempDir()
	require.NoError(t, probe(int(openDir(t, dir).Fd()), labelSessionDir, dir))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents, "the probe file is removed after a verified identity")
}

func TestProbeRefusesPreplantedPath(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o600))
	// Plant symlinks at the next few probe names of this process.
	next := probeCounter.Load() + 1
	for n := next; n < next+1; n++ {
		require.NoError(t, os.Symlink(target, filepath.Join(dir, ProbeName(os.Getpid(), n))))
	}
	err := probe(int(openDir(t, dir).Fd()), labelStdinDir, dir)
	var pe *ProbeError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Refusing to trust the process session control path stdinDir ("+dir+"): its probe file could not be created exclusively (the path may already exist). This filesystem or kernel gives no usable creation time. Terminating.", err.Error())
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
}

func TestProbeNamesCountUp(t *testing.T) {
	a := ProbeName(42, 1)
	assert.Equal(t, ".paperclip-birthtime-probe-42-1", a)
	assert.True(t, strings.HasPrefix(a, ProbePrefix))
}
