//go:build pprof

package main

import (
	"os"
	"runtime/pprof"
)

// A profiling build (go build -tags pprof) writes a CPU profile of the
// whole run to $PCWRAP_CPUPROFILE, for scripts/bench-pcwrap with
// PCWRAP_BENCH_TAGS=pprof. The production binary has no such code.

var profile *os.File

func startProfile() {
	path := os.Getenv("PCWRAP_CPUPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return
	}
	profile = f
}

func exit(code int) {
	if profile != nil {
		pprof.StopCPUProfile()
		profile.Close()
	}
	os.Exit(code)
}
