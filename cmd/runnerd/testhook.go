//go:build testhooks

package main

import (
	"io"
	"os"
	"os/exec"
)

// In test-hook builds, PCRUNNER_TESTHOOK_EXEC=1 makes runnerd start a shell
// child the ordinary way (inheriting runnerd's environment) that prints its
// own /proc/self/environ and then runnerd's (/proc/$PPID/environ), so a
// black-box test can prove the bootstrap ticket reaches neither.
func init() {
	testHook = func(stdout, stderr io.Writer) (int, bool) {
		if os.Getenv("PCRUNNER_TESTHOOK_EXEC") != "1" {
			return 0, false
		}
		cmd := exec.Command("/bin/sh", "-c", `cat /proc/self/environ; printf '\n--runnerd--\n'; cat /proc/$PPID/environ`)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Run(); err != nil {
			return 1, true
		}
		return 0, true
	}
}
