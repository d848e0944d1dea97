// Package procsession launches and inspects pcwrap process sessions from
// the host side (acp.md §3.1, pcwrap-protocol.md §2-§3): one session
// directory per wrapped child under <state-dir>/process-sessions/. The
// agent executor and the client terminals both run their children this
// way.
package procsession

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/cgroup"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// Dir is the directory under the state dir that holds one session
// directory per wrapped child (acp.md §3.1).
const Dir = "process-sessions"

// maxInlinePayload is the largest base64 payload passed in the environment;
// larger ones are staged as command.b64 (pcwrap-protocol.md §2.3: 64×1024
// characters, below Linux's 128 KiB per-string cap).
const maxInlinePayload = 64 * 1024

// dirMode is the mode of the session directory and its queues (acp.md §3.1).
const dirMode = 0o700

// Spec is what one pcwrap launch needs.
type Spec struct {
	StateDir string
	Pcwrap   string
	Argv     []string // child command and args
	Cwd      string
	// Env is pcwrap's environment (the child inherits it, §2.4).
	Env []string
	// PayloadEnv is the payload's env (§2.3), overlaid on Env for the
	// child only; nil for none.
	PayloadEnv map[string]string
	// Tuning are extra pcwrap variables ("K=V", §2.2), e.g. the grace.
	Tuning []string
}

// launched is a started pcwrap. The caller reaps Cmd.
type launched struct {
	UUID string
	Dir  string
	Cmd  *exec.Cmd
	// Wrapper names the pcwrap process; zero when /proc could not tell.
	Wrapper Wrapper
}

// Wrapper names one pcwrap process by its pid and start time (field 22 of
// /proc/<pid>/stat, clock ticks since boot), which together never name
// another process. A restarted runnerd needs it: a pcwrap that is still
// starting has not taken .pcwrap.lock yet, and only its pid tells it from
// one that is gone.
type Wrapper struct {
	Pid   int
	Start uint64
}

// Known reports whether w names a process at all.
func (w Wrapper) Known() bool { return w.Pid > 0 }

// Running reports whether the process w names still runs: its pid is a
// process started at w.Start that is neither a zombie nor dead.
func (w Wrapper) Running() bool {
	if !w.Known() {
		return false
	}
	state, start, err := procStat(w.Pid)
	return err == nil && start == w.Start && state != 'Z' && state != 'X'
}

// maxEnvironBytes bounds the read of one /proc/<pid>/environ: the kernel's
// usual ARG_MAX (2 MiB) bounds a process's arguments and environment
// together.
const maxEnvironBytes = 2 << 20

// findSettle bounds how long FindWrapper looks again for the pcwrap of a
// directory that has no .pcwrap.lock yet, every findStep. A process caught
// in its exec shows an empty environment for a moment (the kernel records
// where it lies only after the exec's parent has resumed), and a process
// forked but not yet exec'd shows its parent's.
const (
	findSettle = time.Second
	findStep   = 20 * time.Millisecond
)

// FindWrapper finds the pcwrap of a session directory that no record
// names (runnerd went away between starting pcwrap and recording it), by
// its environment: the running process whose sessiondir.EnvDir is dir and
// that started first, pcwrap starting before its child. While dir exists
// without a lock file it looks again, bounded by findSettle. Zero when
// none runs.
func FindWrapper(dir string) Wrapper {
	deadline := time.Now().Add(findSettle)
	for {
		w := findWrapper(dir)
		if w.Known() || !lockPending(dir) || time.Now().After(deadline) {
			return w
		}
		time.Sleep(findStep)
	}
}

// lockPending reports whether dir exists but holds no .pcwrap.lock yet:
// its pcwrap, if any, has not got far enough to create it.
func lockPending(dir string) bool {
	if _, err := os.Lstat(dir); err != nil {
		return false
	}
	_, err := os.Lstat(filepath.Join(dir, sessiondir.LockFile))
	return errors.Is(err, os.ErrNotExist)
}

// findWrapper is one look of FindWrapper.
func findWrapper(dir string) Wrapper {
	want := []byte(sessiondir.EnvDir + "=" + dir)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return Wrapper{}
	}
	var found Wrapper
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() || !hasEnv(pid, want) {
			continue
		}
		state, start, err := procStat(pid)
		if err != nil || state == 'Z' || state == 'X' {
			continue
		}
		if !found.Known() || start < found.Start || start == found.Start && pid < found.Pid {
			found = Wrapper{Pid: pid, Start: start}
		}
	}
	return found
}

// hasEnv reports whether pid's environment holds the entry want.
func hasEnv(pid int, want []byte) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false // another user's process, or gone
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEnvironBytes))
	return err == nil && environHas(b, want)
}

// environHas reports whether the NUL-separated environment b holds the
// entry want, whole.
func environHas(b, want []byte) bool {
	for len(b) > 0 {
		entry, rest, _ := bytes.Cut(b, []byte{0})
		if bytes.Equal(entry, want) {
			return true
		}
		b = rest
	}
	return false
}

// wrapperOf reads the identity of a started, unreaped process.
func wrapperOf(pid int) Wrapper {
	_, start, err := procStat(pid)
	if err != nil {
		return Wrapper{}
	}
	return Wrapper{Pid: pid, Start: start}
}

// procStat reads the state and start time of pid from /proc/<pid>/stat.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("read process status: %w", err)
	}
	return parseStat(b)
}

// parseStat extracts the state (field 3) and start time (field 22) from a
// /proc/<pid>/stat line. The comm field may hold spaces and parentheses,
// so the fields are counted from the last ')'.
func parseStat(b []byte) (state byte, start uint64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("read process status: malformed")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("read process status: short")
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("read process status: %w", err)
	}
	return f[0][0], start, nil
}

// newUUID returns a random UUID v4.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := fmt.Sprintf("%x", b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// Path returns <state-dir>/process-sessions/<uuid>.
func Path(stateDir, uuid string) string {
	return filepath.Join(stateDir, Dir, uuid)
}

// StderrPath returns <state-dir>/process-sessions/<uuid>.stderr, where
// pcwrap's own stderr goes.
func StderrPath(stateDir, uuid string) string {
	return filepath.Join(stateDir, Dir, uuid+".stderr")
}

// Launch creates the session directory and starts pcwrap detached in its
// own session (acp.md §3.1): stdin and stdout /dev/null, stderr appended to
// <uuid>.stderr, events output mode, the payload inline or in command.b64.
// The caller reaps Cmd.
func Launch(spec Spec) (*launched, error) {
	uuid, err := newUUID()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(spec.StateDir, Dir)
	if err := os.MkdirAll(base, dirMode); err != nil {
		return nil, fmt.Errorf("mkdir: %w", err)
	}
	dir := filepath.Join(base, uuid)
	for _, d := range []string{dir, filepath.Join(dir, sessiondir.StdinDir), filepath.Join(dir, sessiondir.EventsDir)} {
		if err := os.Mkdir(d, dirMode); err != nil {
			return nil, fmt.Errorf("mkdir: %w", err)
		}
	}
	payload, err := json.Marshal(struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Cwd     string            `json:"cwd"`
		Env     map[string]string `json:"env,omitempty"`
	}{spec.Argv[0], append([]string{}, spec.Argv[1:]...), spec.Cwd, spec.PayloadEnv})
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	b64 := base64.StdEncoding.EncodeToString(payload)
	env := append([]string{}, spec.Env...)
	env = append(env, spec.Tuning...)
	env = append(env,
		sessiondir.EnvDir+"="+dir,
		sessiondir.EnvOutput+"="+sessiondir.OutputEvents)
	if len(b64) <= maxInlinePayload {
		env = append(env, sessiondir.EnvCommandB64+"="+b64)
	} else if err := os.WriteFile(filepath.Join(dir, sessiondir.CommandFile), []byte(b64), 0o600); err != nil {
		return nil, fmt.Errorf("stage payload: %w", err)
	}
	stderr, err := os.OpenFile(StderrPath(spec.StateDir, uuid), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open stderr file: %w", err)
	}
	defer stderr.Close()
	cmd := exec.Command(spec.Pcwrap)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stderr = stderr // stdin and stdout stay nil: /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start pcwrap: %w", err)
	}
	return &launched{UUID: uuid, Dir: dir, Cmd: cmd, Wrapper: wrapperOf(cmd.Process.Pid)}, nil
}

// WrapperAlive reports whether a pcwrap still holds the session's
// .pcwrap.lock (pcwrap-protocol.md §3): a shared non-blocking flock fails
// while the wrapper's exclusive one is held. A missing directory or lock
// file means no wrapper.
func WrapperAlive(dir string) bool {
	fd, err := unix.Open(filepath.Join(dir, sessiondir.LockFile), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	for {
		err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err == nil {
		_ = unix.Flock(fd, unix.LOCK_UN)
		return false
	}
	return errors.Is(err, unix.EWOULDBLOCK)
}

// maxChildFileBytes bounds .pcwrap.child ({"pgid":…,"startTime":…,
// "cgroup":…}; a cgroup path is at most PATH_MAX).
const maxChildFileBytes = 4096 + 256

// stopWait bounds StopWrapper: the stdin sequence lock and the two
// files; a healthy session takes milliseconds.
const stopWait = time.Second

// StopWrapper queues stdinEnd and shutdown on the session's stdin queue
// (pcwrap-protocol.md §6), numbered from its .pcwrap-stdin-seq counter:
// the lock makes this the only writer meanwhile.
func StopWrapper(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopWait)
	defer cancel()
	c, err := sessiondir.LockSeqCounter(ctx, dir)
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := sessiondir.OpenWriter(dir, c.Next(), sessiondir.WriterOptions{Reserve: c.Store})
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := w.StdinEnd(ctx); err != nil {
		return err
	}
	_, err = w.Shutdown(ctx)
	return err
}

// ReadChildRecord reads the session dir's .pcwrap.child (pcwrap-protocol.md
// §2.4) without following a symlink.
func ReadChildRecord(dir string) (ChildRecord, error) {
	fd, err := unix.Open(filepath.Join(dir, sessiondir.ChildFile), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ChildRecord{}, fmt.Errorf("open child record: %w", err)
	}
	b, err := sessiondir.ReadRegular(fd, maxChildFileBytes, nil)
	unix.Close(fd)
	if err != nil {
		return ChildRecord{}, fmt.Errorf("read child record: %w", err)
	}
	return ParseChildRecord(b)
}

// KillOrphanGroup applies acp.md §5.1 when pcwrap died without an exit
// frame: end what the recorded cgroup still holds (cgroup.kill, then
// "populated 0", then remove it: the kernel does not kill a cgroup whose
// creator died), and SIGKILL the recorded process group only while a
// member still runs whose start time is not earlier than the recorded
// one. It reports whether it signalled the group.
func KillOrphanGroup(dir string) (bool, error) {
	rec, err := ReadChildRecord(dir)
	if err != nil {
		return false, err
	}
	var cgErr error
	if rec.Cgroup != "" {
		if cgErr = cgroup.Cleanup(rec.Cgroup); cgErr != nil {
			cgErr = fmt.Errorf("end agent cgroup: %w", cgErr)
		}
	}
	if !groupHasMemberSince(rec.Pgid, rec.StartTime) {
		return false, cgErr
	}
	if err := unix.Kill(-rec.Pgid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return false, fmt.Errorf("kill agent group: %w", err)
	}
	return true, cgErr
}

// groupHasMemberSince scans /proc for a process in group pgid whose start
// time (field 22 of /proc/<pid>/stat) is at or after since.
func groupHasMemberSince(pgid int, since uint64) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The comm field may hold spaces and parentheses: split after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		// f[0] is field 3 (state); pgrp is field 5, starttime field 22.
		if len(f) < 20 {
			continue
		}
		pg, err1 := strconv.Atoi(f[2])
		st, err2 := strconv.ParseUint(f[19], 10, 64)
		if err1 == nil && err2 == nil && pg == pgid && st >= since && pid > 0 {
			return true
		}
	}
	return false
}

// ChildRecord is .pcwrap.child: the child's group and its leader's start
// time (pcwrap-protocol.md §2.4).
type ChildRecord struct {
	Pgid      int    `json:"pgid"`
	StartTime uint64 `json:"startTime"`
	// Cgroup is the child's cgroup v2 directory (§8.3), "" without one.
	Cgroup string `json:"cgroup,omitempty"`
}

// ParseChildRecord decodes .pcwrap.child; a group id of 0 or 1 (or a
// negative one) is refused: signalling it would hit runnerd or init.
func ParseChildRecord(b []byte) (ChildRecord, error) {
	var rec ChildRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Pgid <= 1 {
		return ChildRecord{}, errors.New("read child record: malformed")
	}
	return rec, nil
}

// ParseUUID checks that s is a lower-case UUID as newUUID makes, so it
// can name a file or directory under the state dir.
func ParseUUID(s string) (string, error) {
	if len(s) != 36 {
		return "", errors.New("parse uuid: malformed")
	}
	for i, c := range []byte(s) {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", errors.New("parse uuid: malformed")
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return "", errors.New("parse uuid: malformed")
			}
		}
	}
	return s, nil
}
