//go:build !linux

package runner

// scrubInitialEnviron is a no-op where no /proc exposes the initial
// environment block.
func scrubInitialEnviron(string) {}
