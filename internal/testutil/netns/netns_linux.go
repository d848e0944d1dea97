// Package netns runs tests of real agent binaries offline: inside a new
// network namespace (`unshare -n` as root, `unshare -rn` otherwise) whose
// only interface is loopback, so an agent that tries to reach the internet
// (model lists, plugin stats, updates) can reach no address but
// 127.0.0.0/8. test/realagents re-executes its whole test binary there;
// Isolate does it for one test of a unit package.
package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// InsideEnv marks a test binary re-executed inside its namespace, so it
// does not re-execute again.
const InsideEnv = "PCRUNNER_IN_LOOPBACK_NETNS"

// childTimeout bounds the test binary Isolate re-executes for one test.
const childTimeout = 10 * time.Minute

// RequireEnv=1 makes a missing namespace or real binary fail instead of
// skip, so a green CI is never vacuous (.ci/run sets it).
const RequireEnv = "PCRUNNER_REQUIRE_REAL_AGENTS"

// Inside reports whether this process runs in the namespace Reexec made.
func Inside() bool { return os.Getenv(InsideEnv) == "1" }

// SkipOrFail skips t with why, or fails it under RequireEnv=1.
func SkipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1)", why, RequireEnv)
	}
	t.Skip(why)
}

// Command returns the command that runs this test binary again with args
// inside a new network namespace (InsideEnv set), or an error, and nothing
// to run, when no namespace can be made here.
func Command(args ...string) (*exec.Cmd, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("find unshare: %w", err)
	}
	flags := "-rn"
	if os.Geteuid() == 0 {
		flags = "-n"
	}
	// A probe first: a failure to make the namespace must be told apart
	// from a test failure of the child.
	if out, err := exec.Command(unshare, flags, "true").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make a network namespace (unshare %s): %w: %s", flags, err, out)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the test binary: %w", err)
	}
	cmd := exec.Command(unshare, append([]string{flags, "--", self}, args...)...)
	cmd.Env = append(os.Environ(), InsideEnv+"=1")
	return cmd, nil
}

// Reexec runs this test binary again, with the same arguments, inside the
// namespace and returns its exit code (test/realagents' TestMain).
func Reexec() (int, error) {
	cmd, err := Command(os.Args[1:]...)
	if err != nil {
		return 0, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
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

// Ready brings lo up in the namespace and checks that it is the only
// interface; it is called inside, before any test runs.
func Ready() error {
	if err := loopbackUp(); err != nil {
		return err
	}
	return onlyLoopback()
}

// Isolate runs t inside the namespace. Outside it re-executes the test
// binary for t alone (-test.run ^Name$) in a new namespace, reports the
// child's output and outcome as t's, and returns false: the caller returns
// at once. Inside, it checks the namespace and returns true: the caller
// runs the test's body. Without a namespace it skips t (fails it under
// RequireEnv=1).
func Isolate(t *testing.T) bool {
	t.Helper()
	if Inside() {
		if err := Ready(); err != nil {
			t.Fatalf("prepare the loopback-only namespace: %v", err)
		}
		return true
	}
	cmd, err := Command("-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v", "-test.timeout="+childTimeout.String())
	if err != nil {
		SkipOrFail(t, "no network namespace with only loopback: "+err.Error())
		return false
	}
	out, err := cmd.CombinedOutput()
	t.Logf("in a loopback-only network namespace:\n%s", out)
	switch {
	case err != nil:
		t.Fatalf("%s in the namespace: %v", t.Name(), err)
	case strings.Contains(string(out), "--- SKIP: "+t.Name()):
		t.Skipf("%s skipped in the namespace", t.Name())
	case !strings.Contains(string(out), "--- PASS: "+t.Name()):
		t.Fatalf("%s did not run in the namespace", t.Name())
	}
	return false
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
