package pcwrap_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// oomScript prints the child's oom_score_adj and whether the setting
// variable reached it, then waits for stdin to end.
const oomScript = `echo "adj=$(cat /proc/self/oom_score_adj) env=${PCWRAP_OOM_SCORE_ADJ:-none}"; cat`

// ownOOM is the test process's oom_score_adj, which pcwrap inherits.
func ownOOM(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	require.NoError(t, err)
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return v
}

// TestOOMScoreAdjOfChild: the child starts with oom_score_adj
// max(pcwrap's own, the setting), default 500, from the flag before
// PCWRAP_OOM_SCORE_ADJ, which never reaches the child; pcwrap keeps its
// own value (raised only around the spawn).
func TestOOMScoreAdjOfChild(t *testing.T) {
	own := ownOOM(t)
	if own > 500 {
		t.Skipf("this process's oom_score_adj %d is above the default already", own)
	}
	cases := []struct {
		name    string
		env     []string
		args    []string
		wrapper []string
		want    string
		pcwrap  string // pcwrap's own value while it runs
	}{
		{name: "default", want: "adj=500 env=none", pcwrap: strconv.Itoa(own)},
		{name: "env", env: []string{"PCWRAP_OOM_SCORE_ADJ=800"}, want: "adj=800 env=none", pcwrap: strconv.Itoa(own)},
		{name: "flag over env", env: []string{"PCWRAP_OOM_SCORE_ADJ=800"}, args: []string{"--oom-score-adj=700"}, want: "adj=700 env=none", pcwrap: strconv.Itoa(own)},
		{name: "never below pcwrap's own", env: []string{"PCWRAP_OOM_SCORE_ADJ=100"},
			wrapper: []string{"sh", "-c", `echo 300 > /proc/self/oom_score_adj && exec "$@"`, "sh"}, want: "adj=300 env=none", pcwrap: "300"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, opts{mode: "stdout", payload: sh(oomScript), env: c.env, args: c.args, wrapper: c.wrapper})
			s.waitFrame(waitBound, "the child's line", func(fr []frame.Frame) bool { return strings.Contains(output(fr, frame.StreamStdout), "\n") })
			assert.Equal(t, c.want+"\n", output(s.frames(), frame.StreamStdout))
			b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/oom_score_adj")
			require.NoError(t, err)
			assert.Equal(t, c.pcwrap, strings.TrimSpace(string(b)), "pcwrap keeps its own value")
			s.put(1, stdinEndMsg)
			assert.Equal(t, 0, s.wait(waitBound))
		})
	}
}

// TestOOMScoreAdjInvalid: a bad setting is a clear error before
// anything starts.
func TestOOMScoreAdjInvalid(t *testing.T) {
	t.Parallel()
	s := start(t, opts{mode: "stdout", payload: sh(oomScript), env: []string{"PCWRAP_OOM_SCORE_ADJ=lots"}})
	assert.Equal(t, 1, s.wait(waitBound))
	assert.Contains(t, s.stderr.String(), `PCWRAP_OOM_SCORE_ADJ: invalid oom_score_adj "lots"`)
	s = start(t, opts{mode: "stdout", payload: sh(oomScript), args: []string{"--oom-score-adj=1001"}})
	assert.Equal(t, 2, s.wait(waitBound))
	assert.Contains(t, s.stderr.String(), "--oom-score-adj: invalid oom_score_adj")
}
