package sandbox

import (
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/cgroup"
)

// Sampler reads one cgroup and the load average. Safe for concurrent use:
// it holds only what it found at start.
type Sampler struct {
	// cgroup is runnerd's own cgroup v2 directory as found at start ("" when
	// none is mounted); kept even if runnerd is moved later (§9). The files
	// are hierarchical: the agents' session cgroups below it count.
	cgroup  string
	loadavg string
}

// NewSampler finds runnerd's cgroup: the cgroup2 mount from
// /proc/self/mountinfo and the "0::" line of /proc/self/cgroup.
func NewSampler() *Sampler {
	dir, err := cgroup.Own()
	if err != nil {
		dir = ""
	}
	return &Sampler{cgroup: dir, loadavg: loadAvgPath}
}

// Sample reads every value now; root is the workspace root for statfs
// ("" for none).
func (s *Sampler) Sample(root string) Sample {
	var out Sample
	if s.cgroup != "" {
		if b, err := readBounded(filepath.Join(s.cgroup, cpuStatFile)); err == nil {
			if v, err := ParseCPUStat(b); err == nil {
				out.CPUUsageSeconds = &v
			}
		}
		out.MemoryBytes = counter(filepath.Join(s.cgroup, memCurrentFile))
		out.PidsCurrent = counter(filepath.Join(s.cgroup, pidsFile))
		if b, err := readBounded(filepath.Join(s.cgroup, memMaxFile)); err == nil {
			if v, ok, err := ParseLimit(b); err == nil && ok {
				out.MemoryLimitBytes = &v
			}
		}
	}
	if root != "" {
		var st unix.Statfs_t
		if unix.Statfs(root, &st) == nil {
			free, total := st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize)
			out.DiskFreeBytes, out.DiskTotalBytes = &free, &total
		}
	}
	if b, err := readBounded(s.loadavg); err == nil {
		if v, err := ParseLoadAvg(b); err == nil {
			out.LoadAverage1m = &v
		}
	}
	return out
}

func counter(path string) *uint64 {
	b, err := readBounded(path)
	if err != nil {
		return nil
	}
	v, err := ParseCounter(b)
	if err != nil {
		return nil
	}
	return &v
}

// readBounded reads at most maxStatFile bytes of path.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxStatFile))
}
