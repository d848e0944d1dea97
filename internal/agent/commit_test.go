package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// gatedSink is a Sink whose every Commit announces itself on entered and
// then waits for a value on release (or returns fail).
type gatedSink struct {
	entered chan struct{}
	release chan error

	// mu guards order.
	mu    sync.Mutex
	order []string // the "n" payload of each committed batch's first event
}

func newGatedSink() *gatedSink {
	return &gatedSink{entered: make(chan struct{}, 64), release: make(chan error, 64)}
}

func (s *gatedSink) Commit(_ json.RawMessage, _ []ItemText, evs []provider.Event, _ *CommandOutcome) error {
	s.entered <- struct{}{}
	if err := <-s.release; err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		s.order = append(s.order, e.Payload["n"].(string))
	}
	return nil
}

func (s *gatedSink) Drained() bool                { return true }
func (s *gatedSink) DrainSignal() <-chan struct{} { return closedSignal }

func (s *gatedSink) committed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.order...)
}

// awaitEntered waits, bounded, until a Commit is in progress.
func (s *gatedSink) awaitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(testWait):
		t.Fatal("no commit started")
	}
}

// commitRig is a Manager over a gatedSink, with a live process record
// over a real session directory (stdin/ and events/), but no pcwrap.
type commitRig struct {
	m    *Manager
	sink *gatedSink
	dir  string
	p    *process
}

func newCommitRig(t *testing.T) *commitRig {
	t.Helper()
	sink := newGatedSink()
	m := NewManager(Config{StateDir: t.TempDir(), Sink: sink}, Stored{})
	dir := t.TempDir()
	for _, sub := range []string{sessiondir.StdinDir, sessiondir.EventsDir} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, sub), 0o700))
	}
	w, err := sessiondir.OpenWriter(dir, 1, sessiondir.WriterOptions{})
	require.NoError(t, err)
	fs, err := sessiondir.OpenEventsDir(dir)
	require.NoError(t, err)
	p := &process{uuid: "commit-rig", dir: dir, w: w, fs: fs, nextSeq: 1, ended: make(chan struct{})}
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	r := &commitRig{m: m, sink: sink, dir: dir, p: p}
	t.Cleanup(func() {
		for range maxUncommittedBatches * 4 {
			sink.release <- nil // whatever still waits
		}
		m.Close()
		_ = w.Close()
		fs.Close()
	})
	return r
}

// prepare queues one batch whose event is marked n, with lines.
func (r *commitRig) prepare(t *testing.T, n int, lines ...string) {
	t.Helper()
	var ls [][]byte
	for _, l := range lines {
		ls = append(ls, []byte(l))
	}
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	ev := provider.Event{EventType: "harness.diagnostic", Payload: map[string]any{"n": strconv.Itoa(n)}}
	require.NoError(t, r.m.commitThenWriteLocked([]provider.Event{ev}, ls))
}

func (r *commitRig) exists(name string) bool {
	_, err := os.Stat(filepath.Join(r.dir, name))
	return err == nil
}

// TestCommitLeavesTheLockFree: while a batch's write is in progress (the
// sink blocks), the Manager's lock is free and later batches are prepared
// behind it; they become durable in the order they were prepared, one
// write each.
func TestCommitLeavesTheLockFree(t *testing.T) {
	r := newCommitRig(t)
	r.prepare(t, 1)
	r.sink.awaitEntered(t)
	requireLockFree(t, r.m, "the Manager's lock is held across the store's write")
	for n := 2; n <= 5; n++ {
		r.prepare(t, n)
	}
	for range 5 {
		r.sink.release <- nil
	}
	require.NoError(t, r.m.Sync())
	require.Equal(t, []string{"1", "2", "3", "4", "5"}, r.sink.committed())
}

// TestCommitWritesAndDeletesAfterTheWrite: a stdin line is written, and an
// event file the batch consumed is deleted, only once the write that
// covers them is durable (acp.md §3.2, §3.3).
func TestCommitWritesAndDeletesAfterTheWrite(t *testing.T) {
	r := newCommitRig(t)
	event := filepath.Join(sessiondir.EventsDir, sessiondir.SeqName(1))
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, event), []byte(`{}`), 0o600))
	r.m.mu.Lock()
	r.p.pending = []string{sessiondir.SeqName(1)}
	r.p.consumed = 1
	r.m.mu.Unlock()
	r.prepare(t, 1, "line one", "line two")
	r.sink.awaitEntered(t)
	stdin1 := filepath.Join(sessiondir.StdinDir, sessiondir.SeqName(1))
	require.False(t, r.exists(stdin1), "a stdin line before its commit")
	require.True(t, r.exists(event), "an event file deleted before its commit")
	r.sink.release <- nil
	require.NoError(t, r.m.Sync())
	require.True(t, r.exists(stdin1))
	require.True(t, r.exists(filepath.Join(sessiondir.StdinDir, sessiondir.SeqName(2))))
	require.False(t, r.exists(event))
}

// TestCommitBoundStopsConsumption: at maxUncommittedBatches waiting
// batches the event reader's gate (awaitRoom) stays shut, and opens when
// one settles; a command's batch still gets in past the bound.
func TestCommitBoundStopsConsumption(t *testing.T) {
	r := newCommitRig(t)
	r.prepare(t, 1)
	r.sink.awaitEntered(t)
	for n := 2; n <= maxUncommittedBatches; n++ {
		r.prepare(t, n)
	}
	shut, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, r.m.commits.awaitRoom(shut), context.Canceled, "the reader may prepare past the bound")
	r.prepare(t, maxUncommittedBatches+1) // a command is never refused
	r.sink.release <- nil
	r.sink.release <- nil
	ctx, stop := context.WithTimeout(context.Background(), testWait)
	defer stop()
	require.NoError(t, r.m.commits.awaitRoom(ctx), "two batches settled: room below the bound")
}

// TestCommitFailureIsFatal: a failed write fails its batch and every later
// one; none of their lines is written, and nothing more is committed.
func TestCommitFailureIsFatal(t *testing.T) {
	r := newCommitRig(t)
	r.prepare(t, 1, "never")
	r.sink.awaitEntered(t)
	r.sink.release <- errors.New("disk gone")
	require.ErrorContains(t, r.m.Sync(), "disk gone")
	require.False(t, r.exists(filepath.Join(sessiondir.StdinDir, sessiondir.SeqName(1))))
	r.m.mu.Lock()
	err := r.m.commitThenWriteLocked(nil, [][]byte{[]byte("later")})
	r.m.mu.Unlock()
	require.ErrorContains(t, err, "disk gone")
	require.Empty(t, r.sink.committed())
}

// requireLockFree fails with why unless m's lock can be taken within
// testWait.
func requireLockFree(t *testing.T, m *Manager, why string) {
	t.Helper()
	locked := make(chan struct{})
	go func() {
		m.mu.Lock()
		m.mu.Unlock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-time.After(testWait):
		t.Fatal(why)
	}
}

// prepareInline queues one batch marked n the way the event reader does:
// for the caller to settle (commits.drain) once it holds no lock.
func (r *commitRig) prepareInline(t *testing.T, n int) {
	t.Helper()
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	r.m.settleInline = true
	defer func() { r.m.settleInline = false }()
	ev := provider.Event{EventType: "harness.diagnostic", Payload: map[string]any{"n": strconv.Itoa(n)}}
	require.NoError(t, r.m.commitThenWriteLocked([]provider.Event{ev}, nil))
}

// TestCommitSettledByItsPreparer: the reader's batch is settled on the
// reader's own goroutine (drain returns only after the write); while
// another goroutine is settling, drain leaves the batch to it and returns
// at once, and the order of preparation holds across both.
func TestCommitSettledByItsPreparer(t *testing.T) {
	r := newCommitRig(t)
	r.prepareInline(t, 1)
	drained := make(chan struct{})
	go func() {
		r.m.commits.drain()
		close(drained)
	}()
	r.sink.awaitEntered(t)
	select {
	case <-drained:
		t.Fatal("drain returned before its batch was written: the batch was not settled inline")
	default:
	}
	r.prepareInline(t, 2) // queued behind the write in progress
	r.m.commits.drain()   // the first drainer holds the turn: returns at once
	r.sink.release <- nil
	r.sink.awaitEntered(t) // the first drainer settles the second batch too
	r.sink.release <- nil
	select {
	case <-drained:
	case <-time.After(testWait):
		t.Fatal("drain did not return")
	}
	require.NoError(t, r.m.Sync())
	require.Equal(t, []string{"1", "2"}, r.sink.committed())
}

// TestCommitCloseWaitsForTheDrainer: closing the Manager while a preparer
// settles its batch lets that batch complete; only later ones fail.
func TestCommitCloseWaitsForTheDrainer(t *testing.T) {
	r := newCommitRig(t)
	r.prepareInline(t, 1)
	go r.m.commits.drain()
	r.sink.awaitEntered(t)
	closed := make(chan struct{})
	go func() {
		r.m.Close()
		close(closed)
	}()
	r.sink.release <- nil
	select {
	case <-closed:
	case <-time.After(testWait):
		t.Fatal("Close did not return after the drainer finished")
	}
	require.Equal(t, []string{"1"}, r.sink.committed())
	b := r.m.commits.newest()
	require.NoError(t, b.waitChain())
}
