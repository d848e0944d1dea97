//go:build pprof

package main

import (
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// A profiling build (go build -tags pprof) writes a CPU profile of the
// whole run to $PCWRAP_CPUPROFILE, for scripts/bench-pcwrap with
// PCWRAP_BENCH_TAGS=pprof; a "%p" in the path becomes the pid, so the
// runs of a -benchtime Nx bench each keep theirs (go tool pprof merges
// them). The production binary has no such code.

var profile *os.File

func startProfile() {
	path := os.Getenv("PCWRAP_CPUPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())))
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
