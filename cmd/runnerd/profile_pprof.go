//go:build pprof

package main

import (
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
)

// A profiling build (go build -tags pprof) writes a CPU profile of the
// whole run to $RUNNERD_CPUPROFILE, or an execution trace to
// $RUNNERD_TRACE ("%p" becomes the pid), for the e2e
// benchmarks with RUNNERD_BENCH_TAGS=pprof. The production binary has no
// such code.
func startProfile() (stop func()) {
	if path := os.Getenv("RUNNERD_TRACE"); path != "" {
		if f, err := os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))); err == nil {
			if trace.Start(f) == nil {
				return func() { trace.Stop(); f.Close() }
			}
			f.Close()
		}
	}
	path := os.Getenv("RUNNERD_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())))
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
