package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchFiles and benchBytes make the workspace: 2,000 files,
// 30 MiB, in 40 directories.
const (
	benchFiles = 2000
	benchBytes = 30 << 20
	benchDirs  = 40
)

// cpu is the process's user+system CPU time.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTurnWalks prints, for a 2,000-file 30 MiB workspace whose
// files are older than the recent window, the first (cold) baseline's
// wall time beside the default bound, then per iteration a turn that
// touches nothing: the baseline (stat cache: the previous after-walk),
// the after-walk and the comparison, wall and CPU. Not run by CI (no
// -bench there).
func BenchmarkTurnWalks(b *testing.B) {
	dir := b.TempDir()
	line := strings.Repeat("0123456789abcdef", 4) + "\n"
	body := strings.Repeat(line, benchBytes/benchFiles/len(line))
	old := time.Now().Add(-time.Hour)
	for i := range benchFiles {
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%benchDirs), fmt.Sprintf("f%04d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			b.Fatal(err)
		}
	}
	r, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	walk := func(prev *Snapshot) (*Snapshot, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultWalkTimeout)
		defer cancel()
		start := time.Now()
		s := r.Walk(ctx, prev)
		if !s.Complete() {
			b.Fatalf("walk incomplete: %s", s.Incomplete)
		}
		return s, time.Since(start)
	}
	cold, coldWall := walk(nil)
	b.Logf("workspace: %d files, %d MiB retained; cold baseline %v (bound %v, %.0f%% of it)",
		len(cold.Files), cold.Retained>>20, coldWall.Round(time.Millisecond), DefaultWalkTimeout,
		100*coldWall.Seconds()/DefaultWalkTimeout.Seconds())
	_, coldAfter := walk(cold)
	b.Logf("after-walk over the cold baseline (stat cache) %v (bound %v)", coldAfter.Round(time.Microsecond), DefaultWalkTimeout)
	last := cold
	var baseWall, afterWall, cpuTotal time.Duration
	read := 0
	b.ResetTimer()
	for range b.N {
		c0 := cpu()
		base, bw := walk(last)
		after, aw := walk(base)
		if files := Compare(base, after, NewBudget(WorkspaceDiffBudget, time.Now), func(s string) string { return s }); len(files) != 0 {
			b.Fatalf("%d changes in an untouched workspace", len(files))
		}
		cpuTotal += cpu() - c0
		baseWall += bw
		afterWall += aw
		read += base.Read + after.Read
		last = after
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64((cpuTotal/n).Microseconds())/1000, "cpu-ms/turn")
	b.ReportMetric(float64(read)/float64(b.N), "files-read/turn")
	b.Logf("untouched turn: baseline %v, after-walk %v (bound %v each), CPU %v per turn (target ≤ 15ms), %d files read",
		(baseWall / n).Round(time.Microsecond), (afterWall / n).Round(time.Microsecond), DefaultWalkTimeout,
		(cpuTotal / n).Round(time.Microsecond), read/b.N)
}
