package sandbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParsers(t *testing.T) {
	cpu, err := ParseCPUStat([]byte("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"))
	require.NoError(t, err)
	require.InDelta(t, 2.5, cpu, 1e-9)
	_, err = ParseCPUStat([]byte("user_usec 1\n"))
	require.ErrorIs(t, err, errMalformed)
	_, err = ParseCPUStat([]byte("usage_usec -1\n"))
	require.ErrorIs(t, err, errMalformed)

	n, err := ParseCounter([]byte("4096\n"))
	require.NoError(t, err)
	require.EqualValues(t, 4096, n)
	_, ok, err := ParseLimit([]byte("max\n"))
	require.NoError(t, err)
	require.False(t, ok, "max is no limit")
	n, ok, err = ParseLimit([]byte("1073741824\n"))
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 1<<30, n)

	l, err := ParseLoadAvg([]byte("0.50 0.40 0.30 1/123 4567\n"))
	require.NoError(t, err)
	require.InDelta(t, 0.5, l, 1e-9)
	for _, bad := range []string{"", "NaN 1 1", "-1 0 0", "x"} {
		_, err := ParseLoadAvg([]byte(bad))
		require.ErrorIs(t, err, errMalformed, bad)
	}
}

// TestSampleFakeCgroup: every value from a cgroup directory with all the
// files; memory.max "max" is null; a cgroup without controllers keeps
// cpu.stat and loses the rest; nothing readable → all null, no error.
func TestSampleFakeCgroup(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) { require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)) }
	write(cpuStatFile, "usage_usec 1000000\n")
	write(memCurrentFile, "2048\n")
	write(memMaxFile, "max\n")
	write(pidsFile, "7\n")
	write("loadavg", "1.25 1 1 1/1 1\n")
	s := (&Sampler{cgroup: dir, loadavg: filepath.Join(dir, "loadavg")}).Sample(dir)
	p := s.Payload(time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), 1500*time.Millisecond)
	require.Equal(t, "2026-01-02T03:04:05.006Z", p["sampledAt"])
	require.EqualValues(t, 1500, p["intervalMs"])
	require.InDelta(t, 1.0, p["cpuUsageSeconds"], 1e-9)
	require.EqualValues(t, 2048, p["memoryBytes"])
	require.Nil(t, p["memoryLimitBytes"])
	require.EqualValues(t, 7, p["pidsCurrent"])
	require.InDelta(t, 1.25, p["loadAverage1m"], 1e-9)
	require.Positive(t, p["diskTotalBytes"])
	require.NotNil(t, p["diskFreeBytes"])

	require.NoError(t, os.Remove(filepath.Join(dir, memCurrentFile)))
	require.NoError(t, os.Remove(filepath.Join(dir, pidsFile)))
	p = (&Sampler{cgroup: dir, loadavg: filepath.Join(dir, "loadavg")}).Sample(dir).Payload(time.Now(), time.Second)
	require.NotNil(t, p["cpuUsageSeconds"])
	require.Nil(t, p["memoryBytes"])
	require.Nil(t, p["pidsCurrent"])

	p = (&Sampler{loadavg: filepath.Join(dir, "missing")}).Sample("").Payload(time.Now(), time.Second)
	for _, k := range []string{"cpuUsageSeconds", "memoryBytes", "memoryLimitBytes", "pidsCurrent", "diskFreeBytes", "diskTotalBytes", "loadAverage1m"} {
		require.Contains(t, p, k)
		require.Nil(t, p[k], k)
	}
}

// TestSampleThisHost: on this machine the values whose source exists are
// numbers (cgroup2 may be absent, or mounted at /sys/fs/cgroup/unified).
func TestSampleThisHost(t *testing.T) {
	s := NewSampler()
	p := s.Sample(t.TempDir()).Payload(time.Now(), time.Second)
	require.NotNil(t, p["diskTotalBytes"])
	require.NotNil(t, p["diskFreeBytes"])
	if _, err := os.Stat(loadAvgPath); err == nil {
		require.NotNil(t, p["loadAverage1m"])
	}
	if s.cgroup != "" {
		if _, err := os.Stat(filepath.Join(s.cgroup, cpuStatFile)); err == nil {
			require.NotNil(t, p["cpuUsageSeconds"], "cgroup %s", s.cgroup)
		}
	}
}
