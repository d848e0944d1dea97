// Package cgroup gives pcwrap's child a cgroup v2 of its own where the
// hierarchy is writable (pcwrap-protocol.md §8.3): the kernel's own
// record of every process the child starts, ended at once by
// cgroup.kill and proven empty by "populated 0" in cgroup.events. Where
// no cgroup can be made, callers fall back to the process-tree walk and
// never fail a session for it.
package cgroup

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Files and names of the hierarchy (Documentation/admin-guide/cgroup-v2.rst).
const (
	mountInfoPath = "/proc/self/mountinfo"
	selfCgroup    = "/proc/self/cgroup"
	procsFile     = "cgroup.procs"
	eventsFile    = "cgroup.events"
	killFile      = "cgroup.kill"         // kernel 5.14 and later
	memEventsFile = "memory.events"       // only where the memory controller is enabled
	namePrefix    = "pcwrap-"             // every cgroup made here; Cleanup refuses others
	maxEventsSize = 4096                  // cgroup.events and memory.events are a few lines
	maxSelfCgroup = 64 << 10              // /proc/self/cgroup: a line per v1 hierarchy and the v2 one
	dirMode       = 0o755                 // as systemd makes its cgroups
	nameRandBytes = 6                     // beside the pid, so a reused pid never collides
	killRetry     = 10 * time.Millisecond // pace of the populated check after a kill
)

// KillWait bounds the wait for "populated 0" after cgroup.kill: SIGKILL
// needs no cooperation, so only a task stuck in the kernel (D state), or
// one a loaded machine has not scheduled yet to exit, takes longer. A
// CI run with a load average above 10 once needed more than 2 s.
const KillWait = 5 * time.Second

// rekillEvery re-arms cgroup.kill while End waits, should a task have
// slipped past the first one.
const rekillEvery = 500 * time.Millisecond

// ErrNotCgroup refuses a recorded path that is not a cgroup this package
// made (Cleanup reads it from a file on disk).
var ErrNotCgroup = errors.New("cgroup: not a pcwrap cgroup")

// Cgroup is one child cgroup, held open by a directory fd; its control
// files are opened relative to that fd and never through a symlink.
// Not safe for concurrent Close; the other methods may run concurrently.
type Cgroup struct {
	path string
	dir  *os.File
}

// Path is the cgroup's absolute directory.
func (c *Cgroup) Path() string { return c.path }

// FD is the directory fd for SysProcAttr.CgroupFD (CLONE_INTO_CGROUP).
func (c *Cgroup) FD() int { return int(c.dir.Fd()) }

// Close releases the directory fd.
func (c *Cgroup) Close() error { return c.dir.Close() }

// mountPoint returns the cgroup2 mount's directory and the cgroup it
// shows as its root, from mountinfo.
func mountPoint() (dir, root string, err error) {
	f, err := openProc(mountInfoPath)
	if err != nil {
		return "", "", fmt.Errorf("open mountinfo: %w", err)
	}
	defer f.close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 35 98:0 /root /mnt opts - fstype source super": the
		// optional fields end at " - ". Only a cgroup2 line is split.
		pre, post, ok := bytes.Cut(sc.Bytes(), []byte(" - "))
		if !ok || !bytes.HasPrefix(post, []byte("cgroup2 ")) {
			continue
		}
		ff := strings.Fields(string(pre))
		if len(ff) < 5 {
			continue
		}
		return unescape(ff[4]), unescape(ff[3]), nil
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("read mountinfo: %w", err)
	}
	return "", "", errors.New("find cgroup2 mount: none")
}

// procFile reads a /proc file through a bare fd: an os.File would try
// to register it with the poller first (five syscalls that fail), and
// Create runs before every child's start.
type procFile struct{ fd int }

func openProc(path string) (procFile, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	return procFile{fd}, err
}

func (f procFile) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f procFile) close() { unix.Close(f.fd) }

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Own returns the directory of the calling process's cgroup v2: the
// "0::<path>" line of /proc/self/cgroup under the cgroup2 mount.
func Own() (string, error) {
	mnt, root, err := mountPoint()
	if err != nil {
		return "", err
	}
	f, err := openProc(selfCgroup)
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	defer f.close()
	b, err := io.ReadAll(io.LimitReader(f, maxSelfCgroup))
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		p, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		// Inside a cgroup namespace the path is relative to the mount's
		// root already; outside one, strip the mounted root.
		if root != "/" {
			rel, ok := strings.CutPrefix(p, root)
			if ok && (rel == "" || rel[0] == '/') {
				p = rel
			}
		}
		return filepath.Join(mnt, filepath.Clean("/"+p)), nil
	}
	return "", errors.New("read own cgroup: no cgroup v2 line")
}

// Create makes a fresh child of the calling process's cgroup, named
// pcwrap-<pid>-<random>, and opens it. It leaves the siblings alone:
// Sweep removes what dead wrappers left, off the path to the child's
// start.
func Create() (*Cgroup, error) {
	parent, err := Own()
	if err != nil {
		return nil, err
	}
	// One getrandom(2): crypto/rand would first set up its vDSO state,
	// a cost paid before every child's start for six bytes.
	var r [nameRandBytes]byte
	if n, err := unix.Getrandom(r[:], 0); err != nil || n != len(r) {
		return nil, fmt.Errorf("read random: %d bytes, %v", n, err)
	}
	path := filepath.Join(parent, namePrefix+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(r[:]))
	if err := unix.Mkdir(path, dirMode); err != nil {
		return nil, fmt.Errorf("mkdir %s: %w", path, err)
	}
	c, err := open(path)
	if err != nil {
		_ = unix.Rmdir(path)
		return nil, err
	}
	// The control files a terminate needs must be there (cgroup.kill
	// came with kernel 5.14) and usable: access(2) asks without opening.
	for _, f := range []struct {
		name string
		mode uint32
	}{{killFile, unix.W_OK}, {eventsFile, unix.R_OK}} {
		if err := unix.Faccessat(int(c.dir.Fd()), f.name, f.mode, 0); err != nil {
			c.Close()
			_ = unix.Rmdir(path)
			return nil, fmt.Errorf("access %s: %w", f.name, err)
		}
	}
	return c, nil
}

// Sweep removes the empty cgroups that wrappers killed before their
// cleanup left beside c: pcwrap-<pid>-… whose pid no longer runs.
// rmdir refuses a populated cgroup, and a cgroup whose pid runs (its
// wrapper, or a stranger with the reused pid) is left alone.
func (c *Cgroup) Sweep() { sweep(filepath.Dir(c.path)) }

func sweep(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !validName(name) {
			continue
		}
		pid, _, _ := strings.Cut(strings.TrimPrefix(name, namePrefix), "-")
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		_ = unix.Rmdir(filepath.Join(parent, name))
	}
}

// open opens an existing cgroup directory without following a symlink.
func open(path string) (*Cgroup, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &Cgroup{path: path, dir: os.NewFile(uintptr(fd), path)}, nil
}

// writeFile writes s to a control file of the cgroup.
func (c *Cgroup) writeFile(name, s string) error {
	fd, err := unix.Openat(int(c.dir.Fd()), name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("openat %s: %w", name, err)
	}
	defer unix.Close(fd)
	for {
		_, err = unix.Write(fd, []byte(s))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// readFile reads a small control file of the cgroup.
func (c *Cgroup) readFile(name string) ([]byte, error) {
	fd, err := unix.Openat(int(c.dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("openat %s: %w", name, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, maxEventsSize)
	n := 0
	for n < len(buf) {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if k == 0 {
			break
		}
		n += k
	}
	return buf[:n], nil
}

// AddProc moves pid into the cgroup (the fallback where
// CLONE_INTO_CGROUP is refused).
func (c *Cgroup) AddProc(pid int) error { return c.writeFile(procsFile, strconv.Itoa(pid)) }

// Populated reads "populated" from cgroup.events: whether any process
// is still in the cgroup or below it.
func (c *Cgroup) Populated() (bool, error) {
	v, err := c.eventValue(eventsFile, "populated")
	return v != 0, err
}

// OOMKills reads oom_kill from memory.events; an error where the memory
// controller is not enabled.
func (c *Cgroup) OOMKills() (uint64, error) { return c.eventValue(memEventsFile, "oom_kill") }

// eventValue reads one "key value" line of a flat-keyed file.
func (c *Cgroup) eventValue(file, key string) (uint64, error) {
	b, err := c.readFile(file)
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(" "))
		if ok && string(k) == key {
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s: %w", file, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("parse %s: no %s", file, key)
}

// Kill SIGKILLs every process in the cgroup and below, at once and
// including those forking meanwhile (cgroup.kill).
func (c *Cgroup) Kill() error { return c.writeFile(killFile, "1") }

// WaitEmpty waits up to d for "populated 0"; it reports whether the
// cgroup is empty. A cgroup that vanished meanwhile (another pcwrap's sweep
// removes an empty one whose creator is gone) is empty.
func (c *Cgroup) WaitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		pop, err := c.Populated()
		if gone(err) {
			return true
		}
		if err != nil || !pop {
			return err == nil
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(killRetry)
	}
}

// gone reports an error of a control file whose cgroup was removed.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}

// Remove removes the (empty) cgroup directory.
func (c *Cgroup) Remove() error {
	if err := unix.Rmdir(c.path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", c.path, err)
	}
	return nil
}

// End kills what the cgroup still holds, waits within KillWait for
// "populated 0" and removes it. It reports an error naming what is left
// when the cgroup did not empty.
func (c *Cgroup) End() error {
	pop, err := c.Populated()
	if gone(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pop {
		empty := false
		for waited := time.Duration(0); !empty && waited < KillWait; waited += rekillEvery {
			if err := c.Kill(); gone(err) {
				return nil
			} else if err != nil {
				return err
			}
			empty = c.WaitEmpty(min(rekillEvery, KillWait-waited))
		}
		if !empty {
			return fmt.Errorf("cgroup %s still populated %v after cgroup.kill", c.path, KillWait)
		}
	}
	return c.Remove()
}

// Cleanup ends a cgroup recorded by a wrapper that died (runnerd's side,
// acp.md §5.1): refuse anything but a pcwrap cgroup on a cgroup2
// filesystem, then kill, wait for "populated 0" and remove. A cgroup
// already gone is no error.
func Cleanup(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || !validName(filepath.Base(path)) {
		return ErrNotCgroup
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return ErrNotCgroup
	}
	c, err := open(path)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	defer c.Close()
	return c.End()
}

// validName accepts pcwrap-<pid>-<hex>, the names Create makes.
func validName(name string) bool {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return false
	}
	pid, r, ok := strings.Cut(rest, "-")
	if !ok || len(r) != 2*nameRandBytes {
		return false
	}
	if _, err := strconv.Atoi(pid); err != nil {
		return false
	}
	_, err := hex.DecodeString(r)
	return err == nil
}
