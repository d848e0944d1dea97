package sessiondir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// writeEvents writes event files as pcwrap does (the far side of the
// contract): one frame per file, numbered from first.
func writeEvents(t *testing.T, session string, first int64, frames ...frame.Frame) {
	t.Helper()
	for i, f := range frames {
		p := filepath.Join(session, EventsDir, SeqName(first+int64(i)))
		require.NoError(t, os.WriteFile(p+TmpSuffix, append(f.AppendJSON(nil), '\n'), 0o600))
		require.NoError(t, os.Rename(p+TmpSuffix, p))
	}
}

func stdoutFrame(s string) frame.Frame { return frame.DataFrame(frame.StreamStdout, []byte(s)) }

// faultFS wraps the real events directory and injects failures.
type faultFS struct {
	EventFS
	mu       sync.Mutex
	lists    int
	listFail func(cycle int) bool          // cycle counts from 1
	readFail func(name string, n int) bool // n counts reads of name from 1
	garbage  func(name string, n int) bool
	reads    map[string]int
	rmFail   bool
}

func (f *faultFS) List() ([]string, error) {
	f.mu.Lock()
	f.lists++
	n := f.lists
	f.mu.Unlock()
	if f.listFail != nil && f.listFail(n) {
		return nil, errors.New("simulated event listing failure")
	}
	return f.EventFS.List()
}

func (f *faultFS) Read(name string) ([]byte, error) {
	f.mu.Lock()
	if f.reads == nil {
		f.reads = map[string]int{}
	}
	f.reads[name]++
	n := f.reads[name]
	f.mu.Unlock()
	if f.readFail != nil && f.readFail(name, n) {
		return nil, errors.New("simulated event read failure")
	}
	if f.garbage != nil && f.garbage(name, n) {
		return []byte("{not json"), nil
	}
	return f.EventFS.Read(name)
}

func (f *faultFS) Remove(name string) error {
	if f.rmFail {
		return errors.New("simulated remove failure")
	}
	return f.EventFS.Remove(name)
}

// consumer plays the host proxy of §9.5 over the reader: stdout data is
// its output, an exit frame its exit code, a fatal reader error exit 1.
type consumer struct {
	out, logs bytes.Buffer
	exitCode  int
	err       error
}

func consume(t *testing.T, session string, wrap func(EventFS) EventFS) *consumer {
	t.Helper()
	fs, err := OpenEventsDir(session)
	require.NoError(t, err)
	defer fs.Close()
	c := &consumer{}
	r := NewEventReader(EventReaderOptions{
		FS:     wrap(fs),
		Logger: slog.New(slog.NewTextHandler(&c.logs, nil)),
	})
	c.err = r.Run(context.Background(), func(ev Event) error {
		switch ev.Frame.Type {
		case frame.FrameData:
			c.out.Write(ev.Frame.Data)
		case frame.FrameExit:
			c.exitCode = 1
			if ev.Frame.Code != nil {
				c.exitCode = *ev.Frame.Code
			}
			return ErrStopReading
		}
		return nil
	})
	if c.err != nil {
		c.exitCode = 1
	}
	return c
}

func attempts(logs string) []string {
	return regexp.MustCompile(`\(attempt \d/5\)`).FindAllString(logs, -1)
}

// Scenario 45: a read of event 2 fails once; the batch stops there and the
// file is retried next cycle, so nothing is lost or reordered.
func TestPcwrap45_ReadFailsOnceIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("AAA\n"), stdoutFrame("BBB\n"), stdoutFrame("CCC\n"), frame.ExitFrame(intp(0), ""))
		c := consume(t, d, func(fs EventFS) EventFS {
			return &faultFS{EventFS: fs, readFail: func(name string, n int) bool { return name == SeqName(2) && n == 1 }}
		})
		require.NoError(t, c.err)
		assert.Equal(t, "AAA\nBBB\nCCC\n", c.out.String())
		assert.Equal(t, 0, c.exitCode)
		assert.Equal(t, []string{"(attempt 1/5)"}, attempts(c.logs.String()))
		assert.Contains(t, c.logs.String(), "ACP process session bridge poll failed: read event file 000000000002.json")
	})
}

// Scenario 46: event 2 never readable: the first event is delivered, then
// five consecutive failed cycles are fatal and name the file.
func TestPcwrap46_ReadNeverSucceedsIsFatalAfterFive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("EARLY\n"), stdoutFrame("LATE\n"), frame.ExitFrame(intp(0), ""))
		start := time.Now()
		c := consume(t, d, func(fs EventFS) EventFS {
			return &faultFS{EventFS: fs, readFail: func(name string, _ int) bool { return name == SeqName(2) }}
		})
		require.ErrorIs(t, c.err, errPollFailed)
		assert.Contains(t, c.err.Error(), "000000000002.json")
		assert.Equal(t, "EARLY\n", c.out.String())
		assert.Equal(t, 1, c.exitCode)
		assert.Equal(t, []string{"(attempt 1/5)", "(attempt 2/5)", "(attempt 3/5)", "(attempt 4/5)", "(attempt 5/5)"},
			attempts(c.logs.String()))
		assert.Equal(t, 4*eventPollInterval, time.Since(start), "one attempt per poll period")
		assert.FileExists(t, filepath.Join(d, EventsDir, SeqName(2)), "an undelivered file is never removed")
	})
}

// Scenario 47: event 2 holds garbage JSON once (a torn read); the next
// cycle reads it whole.
func TestPcwrap47_GarbageOnceIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("FIRST\n"), stdoutFrame("SECOND\n"), frame.ExitFrame(intp(0), ""))
		c := consume(t, d, func(fs EventFS) EventFS {
			return &faultFS{EventFS: fs, garbage: func(name string, n int) bool { return name == SeqName(2) && n == 1 }}
		})
		require.NoError(t, c.err)
		assert.Equal(t, "FIRST\nSECOND\n", c.out.String())
		assert.Equal(t, 0, c.exitCode)
		assert.Equal(t, []string{"(attempt 1/5)"}, attempts(c.logs.String()))
		assert.NotContains(t, c.logs.String(), "not json", "file content never reaches a log")
	})
}

// Scenario 48: listing fails on cycles 1, 2 and 4–8: the count resets after
// the good cycle 3, and the fifth consecutive failure is fatal.
func TestPcwrap48_ListingFailuresCountConsecutively(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("x"))
		c := consume(t, d, func(fs EventFS) EventFS {
			return &faultFS{EventFS: fs, listFail: func(n int) bool { return n != 3 }}
		})
		require.ErrorIs(t, c.err, errPollFailed)
		assert.ErrorContains(t, c.err, "simulated event listing failure")
		assert.Equal(t, 1, c.exitCode)
		assert.Equal(t, "x", c.out.String())
		assert.Equal(t, []string{"(attempt 1/5)", "(attempt 2/5)",
			"(attempt 1/5)", "(attempt 2/5)", "(attempt 3/5)", "(attempt 4/5)", "(attempt 5/5)"},
			attempts(c.logs.String()))
	})
}

// Scenario 49: every remove fails: the watermark delivers each file exactly
// once, and each failed removal is a warning naming the file.
func TestPcwrap49_RemoveFailureNeverRedelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("hello\n"))
		fs, err := OpenEventsDir(d)
		require.NoError(t, err)
		defer fs.Close()
		var logs, out bytes.Buffer
		r := NewEventReader(EventReaderOptions{
			FS:     &faultFS{EventFS: fs, rmFail: true},
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		cycles := 0
		for range 5 {
			_, err := r.Cycle(func(ev Event) error { out.Write(ev.Frame.Data); return nil })
			require.NoError(t, err)
			cycles++
		}
		assert.Equal(t, "hello\n", out.String(), "delivered exactly once over %d cycles", cycles)
		assert.Regexp(t, `failed to remove processed event file.*000000000001\.json`, logs.String())
		assert.Empty(t, attempts(logs.String()), "a failed removal is not a failed cycle")
		assert.Equal(t, int64(1), r.Delivered())
	})
}

// Scenario 44 (telemetry spans of the reference host) is not ported: pcrunner
// has no tracing; runnerd reports through PRP events instead.

// Exactly-once across a restart: files at or below the committed sequence
// are removed unread; the rest are delivered.
func TestEventReaderResumesFromWatermark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("old1"), stdoutFrame("old2"), stdoutFrame("new3"), frame.ExitFrame(intp(0), ""))
		fs, err := OpenEventsDir(d)
		require.NoError(t, err)
		defer fs.Close()
		r := NewEventReader(EventReaderOptions{FS: fs, Delivered: 2, Logger: discard()})
		var got []string
		err = r.Run(context.Background(), func(ev Event) error {
			got = append(got, fmt.Sprintf("%d:%s", ev.Seq, ev.Frame.Data))
			if ev.Frame.Type == frame.FrameExit {
				return ErrStopReading
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, []string{"3:new3", "4:"}, got)
		assert.Empty(t, dirNames(t, filepath.Join(d, EventsDir)))
	})
}

// Delivery precedes removal, and a delivery failure (runnerd could not
// commit) keeps the file for the next cycle.
func TestEventReaderDeliverBeforeRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSession(t)
		writeEvents(t, d, 1, stdoutFrame("a"), frame.ExitFrame(intp(0), ""))
		fs, err := OpenEventsDir(d)
		require.NoError(t, err)
		defer fs.Close()
		var logs bytes.Buffer
		r := NewEventReader(EventReaderOptions{FS: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		failCommit := true
		var got []int64
		err = r.Run(context.Background(), func(ev Event) error {
			assert.FileExists(t, filepath.Join(d, EventsDir, ev.Name), "file still on disk during delivery")
			if ev.Seq == 1 && failCommit {
				failCommit = false
				return errors.New("commit failed")
			}
			got = append(got, ev.Seq)
			if ev.Frame.Type == frame.FrameExit {
				return ErrStopReading
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 2}, got)
		assert.Equal(t, []string{"(attempt 1/5)"}, attempts(logs.String()))
	})
}

// Names that are not pcwrap's event names, symlinks and temp files are
// never delivered; a symlink is not followed.
func TestEventReaderIgnoresForeignEntries(t *testing.T) {
	d := newSession(t)
	ev := filepath.Join(d, EventsDir)
	secret := filepath.Join(t.TempDir(), "secret.json")
	require.NoError(t, os.WriteFile(secret, []byte(`{"type":"data","stream":"stdout","data":"c2VjcmV0"}`), 0o600))
	require.NoError(t, os.Symlink(secret, filepath.Join(ev, SeqName(1))))
	require.NoError(t, os.WriteFile(filepath.Join(ev, "000000000002.json.tmp"), []byte("{}"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(ev, "notes.json"), []byte("{}"), 0o600))
	writeEvents(t, d, 3, frame.ExitFrame(intp(0), ""))
	fs := openEventsFS(t, d)
	// Strict (runnerd's readers): the foreign and temporary entries are
	// not files 1 and 2, so file 3 waits for them.
	r := NewEventReader(EventReaderOptions{FS: fs, Logger: discard()})
	var got []int64
	stop, err := r.Cycle(func(e Event) error { got = append(got, e.Seq); return nil })
	require.NoError(t, err, "one failed cycle is not fatal")
	assert.False(t, stop)
	assert.Empty(t, got)
	// Allowing gaps (tail), file 3 is delivered past them.
	r = NewEventReader(EventReaderOptions{FS: fs, Logger: discard(), AllowGaps: true})
	stop, err = r.Cycle(func(e Event) error { got = append(got, e.Seq); return nil })
	require.NoError(t, err)
	assert.False(t, stop)
	assert.Equal(t, []int64{3}, got)
	assert.FileExists(t, secret)
}

// openEventsFS opens session d's events directory for the test.
func openEventsFS(t *testing.T, d string) *DirFS {
	t.Helper()
	fs, err := OpenEventsDir(d)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fs.Close() })
	return fs
}

// skipFS lists the real directory but leaves out, once each, the names
// skip holds: what a directory read in hash order does to a file created
// while it runs.
type skipFS struct {
	EventFS
	skip map[string]bool
}

func (f *skipFS) List() ([]string, error) {
	names, err := f.EventFS.List()
	out := names[:0]
	for _, n := range names {
		if f.skip[n] {
			delete(f.skip, n)
			continue
		}
		out = append(out, n)
	}
	return out, err
}

// A listing that skips a file while it holds a later one does not make
// the reader pass over it: a fresh listing finds it, and every file is
// delivered once, in order.
func TestEventReaderRelistsForASkippedFile(t *testing.T) {
	d := newSession(t)
	writeEvents(t, d, 1, frame.DataFrame("stdout", []byte("a")), frame.DataFrame("stdout", []byte("b")),
		frame.DataFrame("stdout", []byte("c")), frame.ExitFrame(intp(0), ""))
	fs := openEventsFS(t, d)
	r := NewEventReader(EventReaderOptions{FS: &skipFS{EventFS: fs, skip: map[string]bool{SeqName(2): true}}, Logger: discard()})
	var got []int64
	_, err := r.Cycle(func(e Event) error { got = append(got, e.Seq); return nil })
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 2, 3, 4}, got)
}

// A file missing for good (a fresh listing confirms the gap) is never
// passed over: each cycle fails, and the fifth in a row is fatal.
func TestEventReaderGapFailsTheReader(t *testing.T) {
	d := newSession(t)
	writeEvents(t, d, 1, frame.DataFrame("stdout", []byte("a")))
	writeEvents(t, d, 3, frame.ExitFrame(intp(0), ""))
	fs := openEventsFS(t, d)
	r := NewEventReader(EventReaderOptions{FS: fs, Logger: discard()})
	var got []int64
	for range maxFailedCycles - 1 {
		_, err := r.Cycle(func(e Event) error { got = append(got, e.Seq); return nil })
		require.NoError(t, err)
	}
	_, err := r.Cycle(func(e Event) error { got = append(got, e.Seq); return nil })
	require.ErrorIs(t, err, errPollFailed)
	require.ErrorIs(t, err, errEventGap)
	assert.Equal(t, []int64{1}, got, "file 3 waits for file 2")
}

// Against the real file system: a writer publishes files as pcwrap does
// (temporary name, rename, one after another) while the reader cycles,
// keeping what it delivered (as runnerd does until a commit covers it),
// so the directory holds thousands of files and each listing takes many
// getdents calls that race with the renames. Every file arrives once, in
// order. Before the reader checked the sequence, this lost files on ext4
// in most runs (a listing in hash order held a later file but not an
// earlier one created during it).
func TestEventReaderLosesNoFileToListingRaces(t *testing.T) {
	const listingRaceBound = time.Minute // the whole run: a few seconds here
	const files = 3000
	d := newSession(t)
	fs := openEventsFS(t, d)
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		body := append(frame.DataFrame("stdout", []byte("x")).AppendJSON(nil), '\n')
		for seq := int64(1); seq <= files; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			p := filepath.Join(d, EventsDir, SeqName(seq))
			if os.WriteFile(p+TmpSuffix, body, 0o600) != nil || os.Rename(p+TmpSuffix, p) != nil {
				return
			}
		}
	}()
	// A failed check must not leave the writer filling the directory
	// while the test's cleanup removes it.
	t.Cleanup(func() { close(stop); <-done })
	r := NewEventReader(EventReaderOptions{FS: fs, Logger: discard(), Keep: true})
	next := int64(1)
	deadline := time.Now().Add(listingRaceBound)
	for next <= files && time.Now().Before(deadline) {
		_, err := r.Cycle(func(e Event) error {
			if e.Seq != next {
				return fmt.Errorf("file %d delivered, %d expected", e.Seq, next)
			}
			next++
			return nil
		})
		require.NoError(t, err)
		require.Zero(t, r.failed, "no failed cycle: a file a listing missed is found by the next")
	}
	require.Equal(t, int64(files+1), next, "every file delivered once, in order")
}

// With inotify a new file is delivered without waiting for the poll; the
// wait is bounded so a broken watch still passes on the poll.
func TestEventReaderWatchDeliversNewFiles(t *testing.T) {
	d := newSession(t)
	fs := openEventsFS(t, d)
	r := NewEventReader(EventReaderOptions{FS: fs, Watch: filepath.Join(d, EventsDir), Logger: discard()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, func(ev Event) error {
			got <- string(ev.Frame.Data)
			if ev.Frame.Type == frame.FrameExit {
				return ErrStopReading
			}
			return nil
		})
	}()
	writeEvents(t, d, 1, stdoutFrame("one"))
	assert.Equal(t, "one", <-got)
	writeEvents(t, d, 2, frame.ExitFrame(intp(0), ""))
	assert.Equal(t, "", <-got)
	require.NoError(t, <-done)
}

// The session directory removed under a reader ends it at once with
// ErrSessionGone instead of five retries of an empty listing.
func TestEventReaderSessionGone(t *testing.T) {
	d := newSession(t)
	fs := openEventsFS(t, d)
	r := NewEventReader(EventReaderOptions{FS: fs, Logger: discard()})
	require.NoError(t, os.RemoveAll(d))
	_, err := r.Cycle(func(Event) error { return nil })
	require.ErrorIs(t, err, ErrSessionGone)
}

// FuzzEventReader feeds arbitrary event-file bodies: the reader either
// delivers a frame or fails the cycle with an error that quotes no content.
func FuzzEventReader(f *testing.F) {
	for _, s := range []string{
		`{"type":"data","stream":"stdout","data":"aGk="}`,
		`{"type":"exit","code":0,"signal":null}`,
		`{"type":"weird"}`, `[]`, `null`, ` {}`, `{"type":"data","data":5}`, `"x"`, ``, `{"type":"exit","code":1.5}`, "{\"type\":\"error\",\"message\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d := newSession(t)
		require.NoError(t, os.WriteFile(filepath.Join(d, EventsDir, SeqName(1)), body, 0o600))
		fs, err := OpenEventsDir(d)
		require.NoError(t, err)
		defer fs.Close()
		var logs bytes.Buffer
		r := NewEventReader(EventReaderOptions{FS: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		delivered := 0
		_, err = r.Cycle(func(ev Event) error {
			delivered++
			line := tailLine(ev)
			assert.True(t, bytes.HasPrefix(line, []byte(`{"seq":1`)) && bytes.HasSuffix(line, []byte("\n")))
			return nil
		})
		require.NoError(t, err)
		if delivered == 0 {
			assert.Contains(t, logs.String(), "(attempt 1/5)")
			if len(body) >= 8 {
				assert.False(t, strings.Contains(logs.String(), string(body)), "content leaked into a log")
			}
		}
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Security (replay): a file whose sequence was already delivered, e.g. an
// old event re-planted by a sandbox process, is removed unread.
func TestEventReaderDropsReplayedSeq(t *testing.T) {
	d := newSession(t)
	writeEvents(t, d, 1, stdoutFrame("one"), stdoutFrame("two"))
	fs := openEventsFS(t, d)
	r := NewEventReader(EventReaderOptions{FS: fs, Logger: discard()})
	var got []string
	deliver := func(ev Event) error { got = append(got, string(ev.Frame.Data)); return nil }
	_, err := r.Cycle(deliver)
	require.NoError(t, err)
	writeEvents(t, d, 1, stdoutFrame("replayed"))
	writeEvents(t, d, 3, stdoutFrame("three"))
	_, err = r.Cycle(deliver)
	require.NoError(t, err)
	assert.Equal(t, []string{"one", "two", "three"}, got)
	assert.Empty(t, dirNames(t, filepath.Join(d, EventsDir)), "the replayed file is removed")
}

// Security (path swap): events/ replaced by a symlink to a directory of
// forged frames ends the reader; nothing is read through the link.
func TestEventReaderPathSwapEndsSession(t *testing.T) {
	d := newSession(t)
	fs := openEventsFS(t, d)
	forged := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(forged, EventsDir), 0o700))
	writeEvents(t, forged, 1, frame.ExitFrame(intp(0), ""))
	ev := filepath.Join(d, EventsDir)
	require.NoError(t, os.Rename(ev, ev+".old"))
	require.NoError(t, os.Symlink(filepath.Join(forged, EventsDir), ev))
	r := NewEventReader(EventReaderOptions{FS: fs, Logger: discard()})
	delivered := 0
	_, err := r.Cycle(func(Event) error { delivered++; return nil })
	require.ErrorIs(t, err, ErrSessionGone)
	assert.Zero(t, delivered)
	assert.FileExists(t, filepath.Join(forged, EventsDir, SeqName(1)))
}

// TestEventReaderReusesBuffers: with ReuseRaw and DataBuffer the reader
// reads every file into the same storage and decodes each payload into
// the buffer it was given, and delivers the same frames as without.
func TestEventReaderReusesBuffers(t *testing.T) {
	d := newSession(t)
	writeEvents(t, d, 1, stdoutFrame("first payload\n"), stdoutFrame("second\n"), frame.ErrorFrame("an error"), frame.ExitFrame(intp(0), ""))
	fs := openEventsFS(t, d)
	var given [][]byte
	var raws []*byte
	var out []string
	r := NewEventReader(EventReaderOptions{
		FS: fs, Logger: slog.New(slog.DiscardHandler), ReuseRaw: true,
		DataBuffer: func() []byte {
			b := make([]byte, 0, 64)
			given = append(given, b)
			return b
		},
	})
	err := r.Run(context.Background(), func(ev Event) error {
		raws = append(raws, &ev.Raw[0])
		switch ev.Frame.Type {
		case frame.FrameData:
			assert.Same(t, &given[len(given)-1][:1][0], &ev.Frame.Data[0], "decoded into the buffer given")
			out = append(out, string(ev.Frame.Data))
		case frame.FrameError:
			out = append(out, ev.Frame.Message)
		case frame.FrameExit:
			return ErrStopReading
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"first payload\n", "second\n", "an error"}, out)
	require.Len(t, raws, 4)
	for _, p := range raws[1:] {
		assert.Same(t, raws[0], p, "every file read into the first file's storage")
	}
}
