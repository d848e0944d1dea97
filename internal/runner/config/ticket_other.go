//go:build !linux

package config

// scrubInitialEnviron is a no-op where no /proc exposes the initial
// environment block.
func scrubInitialEnviron(string) {}
