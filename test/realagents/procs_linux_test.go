package realagents

import (
	"fmt"
	"os"
	"syscall"
)

// processesWithHome lists the pids whose environment holds HOME=home: the
// agent and every child it made, even one that left pcwrap's process
// group (each agent session gets its own HOME).
func processesWithHome(home string) []int {
	want := []byte("HOME=" + home + "\x00")
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if containsEntry(b, want) && !isZombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func containsEntry(environ, entry []byte) bool {
	for len(environ) > 0 {
		if len(environ) >= len(entry) && string(environ[:len(entry)]) == string(entry) {
			return true
		}
		i := 0
		for i < len(environ) && environ[i] != 0 {
			i++
		}
		environ = environ[min(i+1, len(environ)):]
	}
	return false
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] == 'Z' || b[i+2] == 'X'
		}
	}
	return false
}

var _ = syscall.Kill
