package pcwrap_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
	"github.com/pcrunner/pcrunner/internal/stdinpoll"
)

// Group A of spec §13: the stdin file race, stdout mode. Each scenario
// runs on the production build; scenario 58 reruns them on the hook
// build with inotify disabled, so tick scans alone must suffice.

type raceVariant struct {
	tags []string
	env  []string
}

var production = raceVariant{}

var noInotify = raceVariant{tags: []string{hookTag}, env: []string{"PCWRAP_TEST_NO_INOTIFY=1"}}

func (v raceVariant) start(t *testing.T, env ...string) *session {
	return start(t, opts{mode: "stdout", tags: v.tags, env: append(append([]string{}, v.env...), env...)})
}

// finish checks the exit after stdinEnd and the exact output.
func finish(t *testing.T, s *session, want string) {
	t.Helper()
	assert.Equal(t, 0, s.wait(waitBound))
	fr := s.frames()
	assert.Equal(t, want, output(fr, frame.StreamStdout))
	assert.Equal(t, 1, count(fr, frame.FrameExit))
}

func scenario01(t *testing.T, v raceVariant) {
	s := v.start(t)
	scans := s.watchStdin()
	s.putRaw(1, "")
	scans.waitScans(t, sessiondir.SeqName(1), settleScans)
	assert.True(t, exists(s.stdinPath(1)), "empty file must stay on disk")
	s.put(1, stdinMsg("late-payload"))
	s.waitOutput(5*time.Second, "late-payload")
	s.put(2, stdinEndMsg)
	finish(t, s, "late-payload")
}

func scenario02(t *testing.T, v raceVariant) {
	s := v.start(t, "PAPERCLIP_PROCESS_SESSION_STDIN_MAX_RETRIES=3")
	s.putRaw(1, `{"type":"stdin","data":`)
	s.put(2, stdinMsg("valid-after-bad"))
	s.waitOutput(5*time.Second, "valid-after-bad")
	assert.False(t, exists(s.stdinPath(1)))
	s.put(3, stdinEndMsg)
	finish(t, s, "valid-after-bad")
}

func scenario03(t *testing.T, v raceVariant) {
	s := v.start(t)
	scans := s.watchStdin()
	s.putRaw(1, "")
	s.put(2, stdinEndMsg)
	scans.waitScans(t, sessiondir.SeqName(2), settleScans)
	assert.Zero(t, count(s.frames(), frame.FrameExit), "stdinEnd must not overtake file 1")
	assert.False(t, s.exited())
	s.put(1, stdinMsg("early-payload"))
	finish(t, s, "early-payload")
}

func scenario04(t *testing.T, v raceVariant) {
	s := v.start(t, "PAPERCLIP_PROCESS_SESSION_STDIN_MAX_RETRIES=3")
	s.putRaw(1, "not json at all: secret-token-123")
	s.put(2, stdinMsg("second"))
	s.waitFrame(5*time.Second, "drop error", func(fr []frame.Frame) bool {
		return hasError(fr, "Dropped unreadable stdin file")
	})
	s.waitOutput(5*time.Second, "second")
	for _, m := range errorsOf(s.frames()) {
		assert.NotContains(t, m, "secret-token", "an error must not echo file content")
	}
	s.put(3, stdinEndMsg)
	finish(t, s, "second")
}

func scenario05(t *testing.T, v raceVariant) {
	s := v.start(t)
	scans := s.watchStdin()
	s.put(2, stdinMsg("second-payload"))
	scans.waitScans(t, sessiondir.SeqName(2), settleScans)
	assert.True(t, exists(s.stdinPath(2)), "file 2 must wait for file 1")
	assert.Empty(t, output(s.frames(), frame.StreamStdout))
	s.put(1, stdinMsg("first-payload"))
	s.waitOutput(5*time.Second, "first-payloadsecond-payload")
	s.put(3, stdinEndMsg)
	finish(t, s, "first-payloadsecond-payload")
}

func scenario06(t *testing.T, v raceVariant) {
	s := v.start(t, "PAPERCLIP_PROCESS_SESSION_STDIN_MAX_RETRIES=3")
	s.put(2, stdinMsg("after-gap"))
	s.waitFrame(5*time.Second, "gap error", func(fr []frame.Frame) bool {
		return hasError(fr, "Advanced past missing stdin files 1 to 1 after 3 retries.")
	})
	s.waitOutput(5*time.Second, "after-gap")
	s.put(3, stdinEndMsg)
	finish(t, s, "after-gap")
}

var raceScenarios = []struct {
	name string
	fn   func(*testing.T, raceVariant)
}{
	{"01_EmptyFileRetried", scenario01},
	{"02_MalformedDroppedThenNext", scenario02},
	{"03_StdinEndNeverOvertakes", scenario03},
	{"04_PermanentlyBrokenDropped", scenario04},
	{"05_HeldUntilPredecessor", scenario05},
	{"06_GapAdvancedAfterRetries", scenario06},
}

// TestPcwrap01to06_StdinRace covers scenarios 1, 2, 3, 4, 5 and 6.
func TestPcwrap01to06_StdinRace(t *testing.T) {
	t.Parallel()
	for _, sc := range raceScenarios {
		t.Run("Scenario"+sc.name, func(t *testing.T) {
			t.Parallel()
			sc.fn(t, production)
		})
	}
}

// TestPcwrap58_NoInotifyTickScansSuffice reruns scenarios 1-6 with
// inotify disabled by the test hook.
func TestPcwrap58_NoInotifyTickScansSuffice(t *testing.T) {
	t.Parallel()
	for _, sc := range raceScenarios {
		t.Run("Scenario"+sc.name, func(t *testing.T) {
			t.Parallel()
			sc.fn(t, noInotify)
		})
	}
}

// TestPcwrap59_EventScansSpendNoRetries: 50 unrelated files created
// within one tick trigger event scans, which must not spend the gap
// budget: the give-up needs three tick scans after file 2 appeared, so it
// cannot come before two full tick intervals (a lower bound only; a slow
// machine makes it later, never earlier).
func TestPcwrap59_EventScansSpendNoRetries(t *testing.T) {
	t.Parallel()
	s := start(t, opts{mode: "stdout", env: []string{"PAPERCLIP_PROCESS_SESSION_STDIN_MAX_RETRIES=3"}})
	s.put(2, stdinMsg("x"))
	t0 := time.Now()
	for i := range 50 {
		require.NoError(t, os.WriteFile(filepath.Join(s.dir, "stdin", fmt.Sprintf("unrelated-%02d.txt", i)), []byte("x"), 0o600))
	}
	s.waitFrame(5*time.Second, "gap error", func(fr []frame.Frame) bool {
		return hasError(fr, "Advanced past missing stdin files")
	})
	assert.GreaterOrEqual(t, time.Since(t0), 2*stdinpoll.TickInterval, "event scans spent the retry budget")
	s.waitOutput(5*time.Second, "x")
	s.put(3, stdinEndMsg)
	finish(t, s, "x")
}
