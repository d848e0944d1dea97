package agent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/pcrunner/pcrunner/internal/procsession"
)

// processSessionsDir is the directory under the state dir that holds one
// session directory per agent (acp.md §3.1).
const processSessionsDir = procsession.Dir

// launchSpec is what one pcwrap launch needs.
type launchSpec struct {
	stateDir string
	pcwrap   string
	argv     []string // agent command and args
	cwd      string
	env      []string // the allowlisted agent env
	// childEnv is set for the agent only, through pcwrap's payload
	// (OpenCode's server password: never in pcwrap's own environment).
	childEnv map[string]string
}

// launched is a started pcwrap.
type launched struct {
	uuid    string
	dir     string
	cmd     *exec.Cmd
	wrapper procsession.Wrapper
}

// sessionPath returns <state-dir>/process-sessions/<uuid>.
func sessionPath(stateDir, uuid string) string { return procsession.Path(stateDir, uuid) }

// launch starts the agent under pcwrap (procsession.Launch). The caller
// reaps cmd.
func launch(spec launchSpec) (*launched, error) {
	l, err := procsession.Launch(procsession.Spec{StateDir: spec.stateDir, Pcwrap: spec.pcwrap,
		Argv: spec.argv, Cwd: spec.cwd, Env: spec.env, PayloadEnv: spec.childEnv})
	if err != nil {
		return nil, fmt.Errorf("launch agent: %w", err)
	}
	return &launched{uuid: l.UUID, dir: l.Dir, cmd: l.Cmd, wrapper: l.Wrapper}, nil
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

func wrapperAlive(dir string) bool { return procsession.WrapperAlive(dir) }

// childRunning reports whether our unreaped child pid is still running:
// its /proc stat state is neither zombie nor dead. Until it is reaped the
// pid cannot name another process.
func childRunning(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || len(b) < i+3 {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

func killOrphanGroup(dir string) (bool, error) { return procsession.KillOrphanGroup(dir) }

// agentProcessID is the agent leader's pid from .pcwrap.child (pcwrap
// makes the agent the leader of its own group, so pid = pgid), or 0 when
// the record is not there yet or malformed.
func agentProcessID(dir string) int {
	rec, err := procsession.ReadChildRecord(dir)
	if err != nil {
		return 0
	}
	return rec.Pgid
}

func parseChildRecord(b []byte) (procsession.ChildRecord, error) {
	return procsession.ParseChildRecord(b)
}
