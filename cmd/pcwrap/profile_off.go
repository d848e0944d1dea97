//go:build !pprof

package main

import "os"

// startProfile and exit are the hooks of a profiling build
// (profile_pprof.go); here they are nothing and os.Exit.
func startProfile() {}

func exit(code int) { os.Exit(code) }
