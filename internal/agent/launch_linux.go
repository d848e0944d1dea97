package agent

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// ProcessSessionsDir is the directory under the state dir that holds one
// session directory per agent (acp.md §3.1).
const ProcessSessionsDir = "process-sessions"

// maxInlinePayload is the largest base64 payload passed in the environment;
// larger ones are staged as command.b64 (pcwrap-protocol.md §2.3: 64×1024
// characters, below Linux's 128 KiB per-string cap).
const maxInlinePayload = 64 * 1024

// dirMode is the mode of the session directory and its queues (acp.md §3.1).
const dirMode = 0o700

// launchSpec is what one pcwrap launch needs.
type launchSpec struct {
	stateDir string
	pcwrap   string
	argv     []string // agent command and args
	cwd      string
	env      []string // the allowlisted agent env
}

// launched is a started pcwrap.
type launched struct {
	uuid string
	dir  string
	cmd  *exec.Cmd
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

// sessionPath returns <state-dir>/process-sessions/<uuid>.
func sessionPath(stateDir, uuid string) string {
	return filepath.Join(stateDir, ProcessSessionsDir, uuid)
}

// launch creates the session directory and starts pcwrap detached in its
// own session (acp.md §3.1): stdin and stdout /dev/null, stderr appended to
// <uuid>.stderr, events output mode, the payload inline or in command.b64.
// The caller reaps cmd.
func launch(spec launchSpec) (*launched, error) {
	uuid, err := newUUID()
	if err != nil {
		return nil, fmt.Errorf("launch agent: %w", err)
	}
	base := filepath.Join(spec.stateDir, ProcessSessionsDir)
	if err := os.MkdirAll(base, dirMode); err != nil {
		return nil, fmt.Errorf("launch agent: mkdir: %w", err)
	}
	dir := filepath.Join(base, uuid)
	for _, d := range []string{dir, filepath.Join(dir, sessiondir.StdinDir), filepath.Join(dir, sessiondir.EventsDir)} {
		if err := os.Mkdir(d, dirMode); err != nil {
			return nil, fmt.Errorf("launch agent: mkdir: %w", err)
		}
	}
	payload, err := json.Marshal(struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Cwd     string   `json:"cwd"`
	}{spec.argv[0], append([]string{}, spec.argv[1:]...), spec.cwd})
	if err != nil {
		return nil, fmt.Errorf("launch agent: encode payload: %w", err)
	}
	b64 := base64.StdEncoding.EncodeToString(payload)
	env := append([]string{}, spec.env...)
	env = append(env,
		sessiondir.EnvDir+"="+dir,
		sessiondir.EnvOutput+"="+sessiondir.OutputEvents)
	if len(b64) <= maxInlinePayload {
		env = append(env, sessiondir.EnvCommandB64+"="+b64)
	} else if err := os.WriteFile(filepath.Join(dir, sessiondir.CommandFile), []byte(b64), 0o600); err != nil {
		return nil, fmt.Errorf("launch agent: stage payload: %w", err)
	}
	stderr, err := os.OpenFile(filepath.Join(base, uuid+".stderr"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("launch agent: open stderr file: %w", err)
	}
	defer stderr.Close()
	cmd := exec.Command(spec.pcwrap)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stderr = stderr // stdin and stdout stay nil: /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("launch agent: start pcwrap: %w", err)
	}
	return &launched{uuid: uuid, dir: dir, cmd: cmd}, nil
}

// FindPcwrap resolves pcwrap (acp.md §3.1): explicit path, else next to
// the running executable, else PATH.
func FindPcwrap(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "pcwrap")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath("pcwrap")
	if err != nil {
		return "", fmt.Errorf("find pcwrap: %w", err)
	}
	return p, nil
}

// wrapperAlive reports whether a pcwrap still holds the session's
// .pcwrap.lock (pcwrap-protocol.md §3): a shared non-blocking flock fails
// while the wrapper's exclusive one is held. A missing directory or lock
// file means no wrapper.
func wrapperAlive(dir string) bool {
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

// maxChildFileBytes bounds .pcwrap.child ({"pgid":…,"startTime":…}).
const maxChildFileBytes = 256

// agentProcessID is the agent leader's pid from .pcwrap.child (pcwrap
// makes the agent the leader of its own group, so pid = pgid), or 0 when
// the record is not there yet or malformed.
func agentProcessID(dir string) int {
	fd, err := unix.Open(filepath.Join(dir, sessiondir.ChildFile), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	b, err := sessiondir.ReadRegular(fd, maxChildFileBytes, nil)
	unix.Close(fd)
	if err != nil {
		return 0
	}
	rec, err := parseChildRecord(b)
	if err != nil {
		return 0
	}
	return rec.Pgid
}

// killOrphanGroup applies acp.md §5.1 when pcwrap died without an exit
// frame: SIGKILL the recorded process group only while a member still runs
// whose start time is not earlier than the recorded one. It reports whether
// it signalled.
func killOrphanGroup(dir string) (bool, error) {
	fd, err := unix.Open(filepath.Join(dir, sessiondir.ChildFile), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open child record: %w", err)
	}
	b, err := sessiondir.ReadRegular(fd, maxChildFileBytes, nil)
	unix.Close(fd)
	if err != nil {
		return false, fmt.Errorf("read child record: %w", err)
	}
	rec, err := parseChildRecord(b)
	if err != nil {
		return false, err
	}
	if !groupHasMemberSince(rec.Pgid, rec.StartTime) {
		return false, nil
	}
	if err := unix.Kill(-rec.Pgid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return false, fmt.Errorf("kill agent group: %w", err)
	}
	return true, nil
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

// childRecord is .pcwrap.child: the agent's group and its leader's start
// time (pcwrap-protocol.md §2.4).
type childRecord struct {
	Pgid      int    `json:"pgid"`
	StartTime uint64 `json:"startTime"`
}

// parseChildRecord decodes .pcwrap.child; a group id of 0 or 1 (or a
// negative one) is refused: signalling it would hit runnerd or init.
func parseChildRecord(b []byte) (childRecord, error) {
	var rec childRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Pgid <= 1 {
		return childRecord{}, errors.New("read child record: malformed")
	}
	return rec, nil
}
