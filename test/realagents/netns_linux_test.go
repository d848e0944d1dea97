package realagents

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// inNetnsEnv marks the test binary re-executed inside its own network
// namespace, so it does not re-execute again.
const inNetnsEnv = "PCRUNNER_REALAGENTS_IN_NETNS"

// reexecInNetns runs this test binary again inside a new network namespace
// (`unshare -n` as root, `unshare -rn` otherwise) and returns its exit
// code. Real agents try to reach the internet (model lists, plugin stats,
// updates); inside the namespace only loopback exists, so no address but
// 127.0.0.0/8 can be reached. It returns an error, and
// runs nothing, when no namespace can be made here.
func reexecInNetns() (int, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return 0, fmt.Errorf("find unshare: %w", err)
	}
	flags := "-rn"
	if os.Geteuid() == 0 {
		flags = "-n"
	}
	// A probe first: a failure to make the namespace must be told apart
	// from a test failure of the child.
	if out, err := exec.Command(unshare, flags, "true").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("make a network namespace (unshare %s): %w: %s", flags, err, out)
	}
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("find the test binary: %w", err)
	}
	cmd := exec.Command(unshare, append([]string{flags, "--", self}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("run the test binary in the namespace: %w", err)
	}
	return 0, nil
}

// loopbackUp brings lo up (a new namespace has it down) with the
// SIOCSIFFLAGS ioctl, so no iproute2 is needed.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("make ifreq: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// onlyLoopback checks that the namespace has no interface but lo, so the
// agents cannot reach any address off this machine.
func onlyLoopback() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("check namespace: interface %s is not loopback", i.Name)
		}
	}
	return nil
}

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
