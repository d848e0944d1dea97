package config

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// maxEnvironBlockBytes bounds how much of the initial environment block the
// scrub reads (beyond: Linux caps argv plus envp at a quarter of the stack
// rlimit, 2 MiB with the usual 8 MiB; 8 MiB leaves room for raised limits).
const maxEnvironBlockBytes = 8 << 20

// scrubInitialEnviron overwrites with NUL bytes the value of every
// name=value entry in the process's initial environment block, the memory
// that /proc/<pid>/environ shows. The Go runtime copied the environment at
// start, so nothing in Go reads that block again. Best effort: on any
// failure (no /proc, a kernel that forbids /proc/self/mem writes) the
// variable is still gone from os.Environ, which is what children inherit.
func scrubInitialEnviron(name string) {
	start, end, ok := environBounds()
	if !ok || end <= start || end-start > maxEnvironBlockBytes {
		return
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer mem.Close()
	block := make([]byte, end-start)
	if n, err := mem.ReadAt(block, int64(start)); err != nil || n != len(block) {
		return
	}
	prefix := []byte(name + "=")
	off := 0
	for off < len(block) {
		entry := block[off:]
		if i := bytes.IndexByte(entry, 0); i >= 0 {
			entry = entry[:i]
		}
		if bytes.HasPrefix(entry, prefix) && len(entry) > len(prefix) {
			zeros := make([]byte, len(entry)-len(prefix))
			_, _ = mem.WriteAt(zeros, int64(start)+int64(off+len(prefix)))
		}
		off += len(entry) + 1
	}
}

// environBounds reads env_start and env_end (fields 50 and 51 of
// /proc/self/stat, proc(5)).
func environBounds() (start, end uint64, ok bool) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name (field 2) may hold spaces and parentheses; fields
	// after the last ')' start at field 3.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(data[i+1:]))
	const envStartField, envEndField, firstField = 50, 51, 3
	if len(fields) <= envEndField-firstField {
		return 0, 0, false
	}
	start, err1 := strconv.ParseUint(fields[envStartField-firstField], 10, 64)
	end, err2 := strconv.ParseUint(fields[envEndField-firstField], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return start, end, true
}
