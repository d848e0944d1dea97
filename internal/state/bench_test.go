package state

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchEvent is a typical small provider delta.
var benchEvent = Event{Type: "item.delta", Priority: P1, Payload: json.RawMessage(`{"channel":"progress","delta":"the quick brown fox jumps over the lazy dog"}`)}

// BenchmarkDurableAppend measures, in the same run and directory, the raw
// fsync rate of the disk (write 512 B + fsync), durable event appends with
// one event per Update (each a store transaction, whose page and meta
// writes bbolt syncs separately, then the projection's write: one data
// sync of the spare, swap, and a directory sync when the spares run out)
// and the projection's file discipline alone, as a write that syncs the
// directory makes it, on two same-size files (disciplineFloor). The target
// was set for the single-file write of two syncs; the store's routine step
// makes three, and a fourth one step in maxSpares. Metrics: fsync/s,
// append/s, append/fsync (target: >= 0.45), floor/fsync and
// append/floor.
//
//	go test -run '^$' -bench DurableAppend -benchtime 200x ./internal/state
func BenchmarkDurableAppend(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "state")
	s, err := Open(Config{Dir: dir, Identity: testIdentity})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	raw, err := os.OpenFile(filepath.Join(dir, "raw-fsync"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	block := make([]byte, 512)
	floor := newDisciplineFloor(b, filepath.Join(dir, "floor"))

	rawSync := func() {
		if _, err := raw.WriteAt(block, 0); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fsync(int(raw.Fd())); err != nil {
			b.Fatal(err)
		}
	}
	appendOne := func() {
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.Enqueue(benchEvent); err != nil {
				return err
			}
			// Keep the outbox short, as a connected runner does.
			return tx.ApplyAck(tx.HighestSourceSeq()-1, 2)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	// Each iteration runs the three in a rotating order, so each follows
	// each of the others equally often: a sync right after another one
	// finds the device's cache just flushed, and a fixed order would favour
	// whichever comes second.
	ops := []func(){rawSync, appendOne, func() { floor.write(b) }}
	var took [3]time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for k := range ops {
			op := (i + k) % len(ops)
			t0 := time.Now()
			ops[op]()
			took[op] += time.Since(t0)
		}
	}
	fsyncTime, appendTime, floorTime := took[0], took[1], took[2]
	fsyncRate := float64(b.N) / fsyncTime.Seconds()
	appendRate := float64(b.N) / appendTime.Seconds()
	floorRate := float64(b.N) / floorTime.Seconds()
	b.ReportMetric(fsyncRate, "fsync/s")
	b.ReportMetric(appendRate, "append/s")
	b.ReportMetric(appendRate/fsyncRate, "append/fsync")
	b.ReportMetric(floorRate/fsyncRate, "floor/fsync")
	b.ReportMetric(appendRate/floorRate, "append/floor")
}

// disciplineFloor is the file discipline of prp.md §9.1 with nothing else:
// overwrite a same-size sibling in place, fdatasync it, swap it in with
// RENAME_EXCHANGE, fsync the directory. Its rate is the most a durable
// append can reach on this disk while keeping that discipline (two device
// flushes where a raw fsync of a block needs one).
type disciplineFloor struct {
	dir   int
	fds   [2]int // the two inodes, as the store alternates between them
	spare int    // index in fds of the inode under the spare name
	buf   []byte
}

func newDisciplineFloor(b *testing.B, path string) *disciplineFloor {
	b.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		b.Fatal(err)
	}
	dir, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	f := &disciplineFloor{dir: dir, buf: make([]byte, padBlock)}
	for i, name := range []string{"spare", "state"} {
		if err := os.WriteFile(filepath.Join(path, name), f.buf, 0o600); err != nil {
			b.Fatal(err)
		}
		if f.fds[i], err = unix.Openat(dir, name, unix.O_WRONLY|unix.O_CLOEXEC, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { unix.Close(f.fds[0]); unix.Close(f.fds[1]); unix.Close(f.dir) })
	return f
}

// write overwrites the spare, syncs it, swaps it in and syncs the
// directory; the old state file is the next spare.
func (f *disciplineFloor) write(b *testing.B) {
	fd := f.fds[f.spare]
	if _, err := unix.Pwrite(fd, f.buf, 0); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fdatasync(fd); err != nil {
		b.Fatal(err)
	}
	if err := unix.Renameat2(f.dir, "spare", f.dir, "state", unix.RENAME_EXCHANGE); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fsync(f.dir); err != nil {
		b.Fatal(err)
	}
	f.spare = 1 - f.spare
}

// BenchmarkDurableAppendBatch128 commits 128 events per Update, the
// executor batch bound (prp.md §8.5). Metrics: events/s and writes/s.
//
//	go test -run '^$' -bench DurableAppendBatch -benchtime 50x ./internal/state
func BenchmarkDurableAppendBatch128(b *testing.B) {
	const batch = 128 // executor batch bound (prp.md §8.5, §12)
	s, err := Open(Config{Dir: filepath.Join(b.TempDir(), "state"), Identity: testIdentity, MaxOutboxBytes: 1 << 20, P0ReserveBytes: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	for b.Loop() {
		err := s.Update(func(tx *Tx) error {
			for range batch {
				if _, err := tx.Enqueue(benchEvent); err != nil {
					return err
				}
			}
			if err := tx.ApplyAck(tx.HighestSourceSeq()-batch, 2); err != nil {
				return err
			}
			return tx.SetRecord("consumedEventSeq", tx.HighestSourceSeq())
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N*batch)/elapsed, "events/s")
	b.ReportMetric(float64(b.N)/elapsed, "writes/s")
}

// BenchmarkReadOneField reads the terminal fence and one journal entry of a
// state whose outbox and journal are full, once through Snapshot (which
// clones both) and once through the narrow accessors.
//
//	go test -run '^$' -bench ReadOneField -benchmem ./internal/state
func BenchmarkReadOneField(b *testing.B) {
	s, err := Open(Config{Dir: filepath.Join(b.TempDir(), "state"), Identity: testIdentity, MaxOutboxBytes: 1 << 20, P0ReserveBytes: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	err = s.Update(func(tx *Tx) error {
		for range 512 { // a busy turn's unacknowledged outbox
			if _, err := tx.Enqueue(benchEvent); err != nil {
				return err
			}
		}
		for i := uint64(1); i <= maxRecentCommands; i++ {
			c := command(i, fmt.Sprintf("cmd_%d", i), "turn.start", `{}`)
			if _, err := tx.BeginCommand(c); err != nil {
				return err
			}
			if _, err := tx.FinishCommand(c.CommandID, StatusCompleted, json.RawMessage(`{"ok":true}`)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Snapshot", func(b *testing.B) {
		for b.Loop() {
			st := s.Snapshot()
			if st.PendingTerminalDelivery != nil {
				b.Fatal("fence")
			}
			if _, ok := st.ProcessedCommands["cmd_1"]; !ok {
				b.Fatal("journal")
			}
		}
	})
	b.Run("Accessors", func(b *testing.B) {
		for b.Loop() {
			if s.PendingTerminalDelivery() != nil {
				b.Fatal("fence")
			}
			if _, ok := s.Result("cmd_1"); !ok {
				b.Fatal("journal")
			}
		}
	})
}
