package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const (
	// fullFSBytes is the size of the test's tmpfs: room for a fresh store,
	// its projection and some steps.
	fullFSBytes = 4 << 20
	// fullFSWait bounds each wait of the full-filesystem test: the write's
	// retries pause at most pressureRetryMax.
	fullFSWait = 10 * time.Second
	// fullFSPoll is the pause between looks at the store's summary.
	fullFSPoll = 5 * time.Millisecond
)

// lockedBuffer is a log destination written by the store's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// mountFullFS mounts a size-limited tmpfs for the test and returns its
// path; it skips when the test may not mount (not root), except under
// CI=true, where the test must run.
func mountFullFS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a size-limited tmpfs (CI must run this test as root): %v", err)
		}
		t.Skipf("needs root to mount a size-limited tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fillFS writes a file until the filesystem is full and returns its path.
func fillFS(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	defer f.Close()
	block := bytes.Repeat([]byte{'x'}, 64<<10)
	for written := 0; written <= fullFSBytes; written += len(block) {
		if _, err := f.Write(block); err != nil {
			require.True(t, errors.Is(err, unix.ENOSPC), "filling: %v", err)
			return path
		}
	}
	t.Fatal("the tmpfs never filled")
	return ""
}

// TestDurabilityFullFilesystemWaitsAndCompletes (durability.md §6.2 on a
// real filesystem): a step that meets a full tmpfs (the store's page
// write or the projection's) waits, reporting the pressure and
// publishing nothing; once space returns it completes, and the state
// reopens with every event.
func TestDurabilityFullFilesystemWaitsAndCompletes(t *testing.T) {
	cfg := testConfig(filepath.Join(mountFullFS(t), "state"))
	cfg.MaxOutboxBytes = 1 << 20
	var log lockedBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	s, err := Open(cfg)
	require.NoError(t, err)
	enqueue(t, s, p1("runner.connected"))
	filler := fillFS(t, filepath.Dir(cfg.Dir))

	big := Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(`{"delta":"` + string(bytes.Repeat([]byte{'y'}, 16<<10)) + `"}`)}
	done := make(chan error, 1)
	go func() {
		done <- s.Update(func(tx *Tx) error {
			for range 2 {
				if _, err := tx.Enqueue(big); err != nil {
					return err
				}
			}
			return tx.SetRecord("big", string(bytes.Repeat([]byte{'z'}, 64<<10)))
		})
	}()
	deadline := time.Now().Add(fullFSWait)
	for !s.Summary().DiskFull {
		select {
		case err := <-done:
			t.Fatalf("the step returned on a full filesystem: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the step never reported a full disk")
		time.Sleep(fullFSPoll)
	}
	require.True(t, s.Summary().StoragePressure)
	require.Len(t, s.Unacked(), 1, "nothing is published before it is durable")
	require.Contains(t, log.String(), "commit state store: write", "the store's own page write met the full disk")

	require.NoError(t, os.Remove(filler))
	select {
	case err := <-done:
		require.NoError(t, err, "the step completes once space returns")
	case <-time.After(fullFSWait):
		t.Fatal("the step did not complete after space returned")
	}
	require.False(t, s.Summary().StoragePressure)
	require.Len(t, s.Unacked(), 3)
	require.NoError(t, s.Close())

	s = openStore(t, cfg)
	require.Len(t, s.Snapshot().Outbox, 4, "the three events and the restart's recovery event")
	requireProjected(t, cfg)
}
