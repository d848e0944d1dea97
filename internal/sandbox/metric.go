// Package sandbox samples the sandbox's resources for sandbox.metric
// (workspace.md §9, beyond the reference): runnerd's own cgroup v2 (found
// once, at start), statfs of the workspace root and /proc/loadavg. Each
// value that cannot be read is null; the others are still reported.
package sandbox

import (
	"bytes"
	"errors"
	"strconv"
	"time"
)

// Files of a cgroup v2 directory and of /proc (Documentation/admin-guide/
// cgroup-v2.rst, proc(5)).
const (
	cpuStatFile    = "cpu.stat"       // "usage_usec N" on every cgroup2, controllers or not
	memCurrentFile = "memory.current" // only where the memory controller is enabled
	memMaxFile     = "memory.max"     // "max" when unlimited
	pidsFile       = "pids.current"   // only where the pids controller is enabled
	loadAvgPath    = "/proc/loadavg"
	// maxStatFile bounds each read: these files are a few lines (cpu.stat
	// has under 20 with every pressure field).
	maxStatFile = 4096
)

// errMalformed is a file whose content is not what the kernel writes.
var errMalformed = errors.New("sandbox: malformed statistics file")

// Sample is one reading; nil is a value that could not be read.
type Sample struct {
	CPUUsageSeconds  *float64
	MemoryBytes      *uint64
	MemoryLimitBytes *uint64 // nil also for "max" (no limit)
	PidsCurrent      *uint64
	DiskFreeBytes    *uint64
	DiskTotalBytes   *uint64
	LoadAverage1m    *float64
}

// Payload is sandbox.metric's payload (workspace.md §9): the sample with
// when it was taken and the interval it was taken at.
func (s Sample) Payload(sampledAt time.Time, interval time.Duration) map[string]any {
	return map[string]any{
		"sampledAt":        sampledAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		"intervalMs":       interval.Milliseconds(),
		"cpuUsageSeconds":  orNull(s.CPUUsageSeconds),
		"memoryBytes":      orNull(s.MemoryBytes),
		"memoryLimitBytes": orNull(s.MemoryLimitBytes),
		"pidsCurrent":      orNull(s.PidsCurrent),
		"diskFreeBytes":    orNull(s.DiskFreeBytes),
		"diskTotalBytes":   orNull(s.DiskTotalBytes),
		"loadAverage1m":    orNull(s.LoadAverage1m),
	}
}

func orNull[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// ParseCPUStat returns cpu.stat's usage_usec in seconds.
func ParseCPUStat(b []byte) (float64, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		v, ok := bytes.CutPrefix(line, []byte("usage_usec "))
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return 0, errMalformed
		}
		return float64(n) / 1e6, nil
	}
	return 0, errMalformed
}

// ParseCounter reads a one-number file (memory.current, pids.current).
func ParseCounter(b []byte) (uint64, error) {
	n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, errMalformed
	}
	return n, nil
}

// ParseLimit reads memory.max: ok is false for "max" (no limit).
func ParseLimit(b []byte) (n uint64, ok bool, err error) {
	if string(bytes.TrimSpace(b)) == "max" {
		return 0, false, nil
	}
	n, err = ParseCounter(b)
	return n, err == nil, err
}

// ParseLoadAvg returns the one-minute load average of /proc/loadavg
// ("0.50 0.40 0.30 1/123 4567").
func ParseLoadAvg(b []byte) (float64, error) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, errMalformed
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil || v < 0 || v != v || v > 1e9 {
		return 0, errMalformed
	}
	return v, nil
}
