package pcwrap_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// keepEnv turns on the keep-group option (client terminals, tools.md §8).
const keepEnv = "PAPERCLIP_PROCESS_SESSION_KEEP_GROUP_ON_EXIT=1"

func hasExit(fr []frame.Frame) bool { return count(fr, frame.FrameExit) > 0 }

// TestKeepGroupOnExit: under the keep-group option a leader's exit is
// reported at once with its status, its background job keeps running
// (pcwrap too), and a shutdown then kills the group: exit, then
// shutdownAck, and pcwrap's status is the leader's code.
func TestKeepGroupOnExit(t *testing.T) {
	t.Parallel()
	s := start(t, opts{
		payload: sh(`trap "" TERM; sleep 300 & echo hi; exit 3`),
		env:     []string{keepEnv, "PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS=300"},
		mode:    "stdout",
	})
	pgid := s.childPgid()
	t.Cleanup(func() {
		if len(groupMembers(pgid)) > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	s.waitFrame(waitBound, "exit frame", hasExit)
	fr := s.frames()
	ex := fr[len(fr)-1]
	require.Equal(t, frame.FrameExit, ex.Type)
	require.NotNil(t, ex.Code)
	assert.Equal(t, 3, *ex.Code)
	assert.Equal(t, "hi\n", output(fr, frame.StreamStdout))
	// The background sleep is alive, and pcwrap waits for a shutdown.
	assert.NotEmpty(t, groupMembers(pgid), "the background job outlives its leader")
	assert.False(t, s.exited(), "pcwrap stays while the group runs")

	s.put(1, shutdownMsg)
	assert.Equal(t, 3, s.wait(waitBound))
	groupGone(t, pgid, 5*time.Second)
	fr = s.frames()
	assert.Equal(t, 1, count(fr, frame.FrameExit), "one exit frame")
	assert.Equal(t, frame.FrameShutdownAck, fr[len(fr)-1].Type)
}

// TestKeepGroupEndsWithGroup: a kept group whose last member ends by
// itself ends pcwrap too, with the leader's status.
func TestKeepGroupEndsWithGroup(t *testing.T) {
	t.Parallel()
	s := start(t, opts{
		payload: sh(`sleep 0.3 </dev/null >/dev/null 2>&1 & echo hi`),
		env:     []string{keepEnv},
		mode:    "stdout",
	})
	assert.Equal(t, 0, s.wait(waitBound))
	fr := s.frames()
	require.GreaterOrEqual(t, len(fr), 2)
	assert.Equal(t, frame.FrameExit, fr[len(fr)-2].Type)
	assert.Equal(t, frame.FrameShutdownAck, fr[len(fr)-1].Type)
}

// TestKeepGroupKillWhileLeaderRuns: a shutdown before the leader exits is
// the usual terminate(): TERM to the group, KILL after the grace, nothing
// of the group left, even a grandchild that ignores TERM.
func TestKeepGroupKillWhileLeaderRuns(t *testing.T) {
	t.Parallel()
	s := start(t, opts{
		payload: sh(`trap "" TERM; sleep 300 & echo ready; sleep 300`),
		env:     []string{keepEnv, "PAPERCLIP_PROCESS_SESSION_TERMINATE_GRACE_MS=300"},
		mode:    "stdout",
	})
	pgid := s.childPgid()
	t.Cleanup(func() {
		if len(groupMembers(pgid)) > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	s.waitOutput(5*time.Second, "ready\n")
	s.put(1, shutdownMsg)
	assert.Equal(t, 1, s.wait(waitBound))
	groupGone(t, pgid, 5*time.Second)
}

// TestKeepGroupOffKillsGroup: without the option (agents) the group is
// killed once the leader's pipes stay open past the drain bound (§8.1
// item 4), so pcwrap ends by itself.
func TestKeepGroupOffKillsGroup(t *testing.T) {
	t.Parallel()
	s := start(t, opts{payload: sh(`sleep 300 & echo hi`), mode: "stdout"})
	pgid := s.childPgid()
	assert.Equal(t, 0, s.wait(waitBound))
	groupGone(t, pgid, 5*time.Second)
}
