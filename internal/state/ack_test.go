package state

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// ackCrashChildEnv names the state dir of a re-executed test binary that
// sends and ACKs events, then waits to be killed with its last ACK only in
// memory.
const ackCrashChildEnv = "PCRUNNER_STATE_ACK_CRASH_CHILD_DIR"

// ackChildTimeout bounds the wait for the child's report.
const ackChildTimeout = 20 * time.Second

// stalledClock never fires AfterFunc: the idle write of the ACK cursor
// never happens, so a kill always finds the cursor only in memory.
type stalledClock struct{ clock.Clock }

func (stalledClock) AfterFunc(time.Duration, func()) clock.Timer { return stalledTimer{} }

type stalledTimer struct{}

func (stalledTimer) C() <-chan time.Time      { return nil }
func (stalledTimer) Stop() bool               { return true }
func (stalledTimer) Reset(time.Duration) bool { return true }

// ackCrashChild runs in the re-executed binary. It prints, in order, the
// v2 wire bytes of every event it sends, then "acked" once the last ACK
// has emptied the outbox in memory, then blocks on stdin.
func ackCrashChild() {
	cfg := testConfig(os.Getenv(ackCrashChildEnv))
	cfg.Clock = stalledClock{clock.System}
	s, err := Open(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	send := func(after uint64) {
		for _, e := range s.Unsent(after) {
			w, err := e.Wire(2)
			if err != nil {
				fail(err)
			}
			fmt.Println("wire", base64.StdEncoding.EncodeToString(w))
		}
	}
	produce := func(n int) {
		err := s.Update(func(tx *Tx) error {
			for i := range n {
				if _, err := tx.Enqueue(Event{Type: "item.delta", Priority: P1,
					Payload: json.RawMessage(fmt.Sprintf(`{"channel":"progress","delta":"%d"}`, i))}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			fail(err)
		}
	}
	produce(5) // seqs 1..5
	send(0)
	if _, err := s.ApplyAck(2, 2); err != nil { // in memory only
		fail(err)
	}
	produce(1) // seq 6: this write carries cursor 2
	send(5)
	persisted, err := s.ApplyAck(6, 2) // empties the outbox, in memory only
	if err != nil || persisted {
		fail(fmt.Errorf("ack 6: persisted %v, err %v", persisted, err))
	}
	fmt.Println("acked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

// A runner killed after an ACK that lived only in memory restarts from the
// cursor its last write carried (2, not 6) and replays exactly the suffix
// above it, byte for byte; the core admits the replay as duplicates and
// the restart's runner.reconciled as the next new event (prp.md §8.4).
func TestPRP26_CrashAfterInMemoryAckReplaysSuffixAsDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ackCrashChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pipe := out.(*os.File)
	require.NoError(t, pipe.SetReadDeadline(time.Now().Add(ackChildTimeout)))
	core := &fakeCore{committed: map[uint64][]byte{}}
	sent := map[uint64][]byte{}
	rd := bufio.NewReader(pipe)
	for {
		line, err := rd.ReadString('\n')
		require.NoError(t, err, "child ended before its last ACK")
		line = strings.TrimSuffix(line, "\n")
		if line == "acked" {
			break
		}
		w, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(line, "wire "))
		require.NoError(t, err)
		core.admit(t, w)
		sent[core.acked] = w
	}
	require.Equal(t, uint64(6), core.acked)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	s := openStore(t, testConfig(dir))
	require.Equal(t, uint64(2), s.Summary().AckedSourceSeq, "the cursor of the last write")
	var seqs []uint64
	for _, e := range s.Unsent(s.Summary().AckedSourceSeq) {
		w, err := e.Wire(2)
		require.NoError(t, err)
		if prev, ok := sent[e.SourceSeq]; ok {
			require.True(t, bytes.Equal(prev, w), "seq %d replayed byte for byte", e.SourceSeq)
		} else {
			require.Equal(t, prp.EventRunnerReconciled, e.EventType)
		}
		core.admit(t, w)
		seqs = append(seqs, e.SourceSeq)
	}
	require.Equal(t, []uint64{3, 4, 5, 6, 7}, seqs, "exactly the suffix above the file's cursor, then runner.reconciled")
	require.Equal(t, uint64(7), core.acked)
	_, err = s.ApplyAck(core.acked, 2)
	require.NoError(t, err)
}

// onDiskCursor reads the ACK cursor and outbox length from the file.
func onDiskCursor(t *testing.T, cfg Config) (acked uint64, outbox int) {
	t.Helper()
	var st State
	require.NoError(t, json.Unmarshal(readFile(t, cfg), &st))
	return st.AckedSourceSeq, len(st.Outbox)
}

// An ACK that empties the outbox writes nothing of its own; the cursor is
// written ackIdleFlush after it when no other write comes (prp.md §8.4).
func TestAckCursorIsWrittenAfterIdleBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, cfg := newStore(t)
		enqueue(t, s, p1("item.delta"))
		enqueue(t, s, p1("item.delta"))
		before := s.writes.Load()
		persisted, err := s.ApplyAck(2, 2)
		require.NoError(t, err)
		require.False(t, persisted)
		require.Zero(t, s.Summary().OutboxBytes, "the trim is immediate in memory")

		time.Sleep(ackIdleFlush - time.Millisecond)
		synctest.Wait()
		require.Equal(t, before, s.writes.Load(), "no write before the idle bound")
		acked, n := onDiskCursor(t, cfg)
		require.Equal(t, uint64(0), acked)
		require.Equal(t, 2, n)

		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, before+1, s.writes.Load(), "one idle write at the bound")
		acked, n = onDiskCursor(t, cfg)
		require.Equal(t, uint64(2), acked)
		require.Zero(t, n)
	})
}

// A write inside the idle bound carries the cursor and cancels the idle
// write: no write of the ACK's own.
func TestAckCursorRidesOnNextWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, cfg := newStore(t)
		enqueue(t, s, p1("item.delta"))
		_, err := s.ApplyAck(1, 2)
		require.NoError(t, err)
		time.Sleep(ackIdleFlush / 2)
		before := s.writes.Load()
		enqueue(t, s, p1("item.delta"))
		acked, n := onDiskCursor(t, cfg)
		require.Equal(t, uint64(1), acked, "the cursor rode on the event's write")
		require.Equal(t, 1, n)

		time.Sleep(2 * ackIdleFlush)
		synctest.Wait()
		require.Equal(t, before+1, s.writes.Load(), "no idle write after the cursor was saved")
	})
}

// heldClock's AfterFunc timers fire only when the test says, so a callback
// can be made to run late: after a disarm and a re-arm of the idle write.
type heldClock struct {
	clock.Clock
	mu     sync.Mutex
	timers []*heldTimer
}

type heldTimer struct {
	c       *heldClock
	f       func()
	pending bool
}

func (c *heldClock) AfterFunc(_ time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &heldTimer{c: c, f: f, pending: true}
	c.timers = append(c.timers, t)
	return t
}

func (t *heldTimer) C() <-chan time.Time { return nil }
func (t *heldTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.pending
	t.pending = false
	return was
}
func (t *heldTimer) Reset(time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.pending
	t.pending = true
	return was
}

// fire marks the newest timer fired and returns its callback, to be run
// when the test chooses.
func (c *heldClock) fire() func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.timers[len(c.timers)-1]
	t.pending = false
	return t.f
}

// TestIdleFlushLateCallbackKeepsCloseBounded: an idle-write callback that
// fired before a disarm and runs only after a re-arm must neither unmark
// the newer arming nor leave a callback counted that will never run; it
// did, and Close then waited forever (found as a hung benchmark).
func TestIdleFlushLateCallbackKeepsCloseBounded(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	hc := &heldClock{Clock: clock.System}
	cfg.Clock = hc
	s, err := Open(cfg)
	require.NoError(t, err)

	s.mu.Lock()
	s.armIdleLocked()
	s.mu.Unlock()
	late := hc.fire() // fired; its callback has not run yet
	s.mu.Lock()
	s.disarmIdleLocked() // a write saved the cursor meanwhile
	s.armIdleLocked()    // and a new advance arms again
	s.mu.Unlock()
	late() // the first callback runs only now
	s.mu.Lock()
	s.armIdleLocked() // another advance: still armed, nothing more to count
	s.mu.Unlock()
	hc.fire()()

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for an idle-write callback that will never run")
	}
}
