//go:build !pprof

package main

// startProfile is the hook of a profiling build (profile_pprof.go).
func startProfile() (stop func()) { return func() {} }
