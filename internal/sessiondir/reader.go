package sessiondir

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// eventPollInterval is the host's event poll period (spec §9.3, §11:
// 100 ms, re-armed after each cycle).
const eventPollInterval = 100 * time.Millisecond

// maxFailedCycles is how many consecutive failed poll cycles the tolerant
// reader accepts before the failure is fatal (spec §9.3, PR #10213).
const maxFailedCycles = 5

// maxEventFileBytes bounds one event file read. pcwrap reads at most
// 64 KiB per data frame, which base64 makes ~87 KiB; 1 MiB leaves room for
// a long error message and refuses a runaway planted file.
const maxEventFileBytes = 1 << 20

// maxGapRelists bounds the fresh listings in a row that look for the same
// missing file (EventReader.cycle). One is enough: the file existed
// before the fresh listing began, and a directory read returns every
// entry that is neither added nor removed while it runs. (A fresh listing
// may in turn miss a newer file created while it runs; it then delivers
// up to that one and looks again.)
const maxGapRelists = 2

// errPollFailed is returned by EventReader.Run after maxFailedCycles
// consecutive failed cycles; the error wraps the last cycle's failure.
var errPollFailed = errors.New("ACP process session bridge poll failed")

// ErrStopReading may be returned by a Deliver callback to end Run after the
// current file (which counts as delivered) without an error.
var ErrStopReading = errors.New("stop reading events")

// errEventGap: the next event file in sequence is missing while a later
// one is there, in a fresh listing too.
var errEventGap = errors.New("event file missing before a later one")

// errNotObject: an event body must be one JSON object (spec §7.2).
var errNotObject = errors.New("event file is not a JSON object")

// errEventFileTooLarge is the read failure of an event file over the bound.
var errEventFileTooLarge = errors.New("event file too large")

// EventFS is the small filesystem the reader works through: the events/
// directory of one session. Tests wrap it to inject failures; DirFS is the
// real one.
type EventFS interface {
	// List returns the names of regular files ending in ".json".
	List() ([]string, error)
	// Read returns the whole content of a file.
	Read(name string) ([]byte, error)
	// Remove deletes a file; a missing file is not an error.
	Remove(name string) error
}

// Event is one event file, parsed.
type Event struct {
	Seq   int64       // from the file name
	Name  string      // the file name, e.g. 000000000001.json
	Frame frame.Frame // the parsed body
	Raw   []byte      // the body as read, trailing newline included
}

// EventReaderOptions configure an EventReader.
type EventReaderOptions struct {
	// FS is the events directory. Required.
	FS EventFS
	// Watch, when set, is the events directory path watched with inotify so
	// a new file is read at once rather than on the next poll.
	Watch string
	// PollOnly disables the inotify trigger even when Watch is set (tests
	// under testing/synctest; filesystems without inotify).
	PollOnly bool
	// Delivered is the highest sequence already delivered (and, for
	// runnerd, durably committed). Files at or below it are removed unread:
	// after a restart they are the ones consumed before the crash.
	Delivered int64
	// Keep leaves files in place after delivery (pcwrap tail: best effort
	// on a session another consumer drains). The watermark still prevents
	// a second delivery.
	Keep bool
	// AllowGaps delivers past a missing sequence (pcwrap tail, whose files
	// another consumer removes; the reference host's reader). Without it
	// the files are this reader's alone, so they are delivered strictly
	// one after another: pcwrap numbers them from 1 without a hole and
	// publishes each before the next, so a missing file is one the
	// listing skipped (see cycle), and a gap a fresh listing confirms is a
	// failed cycle, never output silently passed over.
	AllowGaps bool
	// Interval overrides eventPollInterval (tests).
	Interval time.Duration
	// Logger receives the poll-failure and removal warnings (default
	// slog.Default()).
	Logger *slog.Logger
	// DataBuffer, when set, returns storage for the next data frame's
	// payload (frame.ParseFrameInto: Frame.Data aliases it when it is
	// large enough), so a consumer that recycles payloads does not
	// allocate and clear 64 KiB per event file. nil means allocate.
	DataBuffer func() []byte
	// ReuseRaw: Event.Raw is valid only until deliver returns, and the
	// next file is read into the same storage (with an FS that implements
	// eventReadIntoFS, as DirFS does). Frame.Data never aliases Raw.
	ReuseRaw bool
}

// eventReadIntoFS is an EventFS that can read into the caller's storage.
type eventReadIntoFS interface {
	EventFS
	// ReadInto is Read into buf's storage when it is large enough (the
	// result aliases buf then).
	ReadInto(name string, buf []byte) ([]byte, error)
}

// EventReader is the tolerant event reader of spec §9.3 (PR #10213), which
// runnerd MUST follow (acp.md §3.3). Each cycle lists events/, and in
// sequence order reads, parses and delivers each file, then removes it. The
// first file that cannot be listed, read, parsed or delivered stops the
// cycle; it is retried next cycle. A cycle that failed is logged as
// "ACP process session bridge poll failed: <reason> (attempt N/5)"; a cycle
// that succeeds resets the count; the fifth consecutive failure ends Run
// with errPollFailed. A delivered-sequence watermark guarantees that a file
// whose removal failed is never delivered twice.
//
// Delivery happens before removal: a Deliver callback that commits the
// event durably and returns nil gets exactly-once consumption ("parse →
// commit durably → delete", spec ARCHITECTURE.md); if the process dies
// between commit and removal, the next reader, given the committed sequence
// as Delivered, removes the file unread.
type EventReader struct {
	opts      EventReaderOptions
	delivered int64
	failed    int    // consecutive failed cycles
	raw       []byte // storage of the last Raw (ReuseRaw)
}

// NewEventReader returns a reader; call Run to start it.
func NewEventReader(opts EventReaderOptions) *EventReader {
	if opts.Interval <= 0 {
		opts.Interval = eventPollInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &EventReader{opts: opts, delivered: opts.Delivered}
}

// Delivered returns the watermark: the highest sequence delivered so far.
// Only safe to call from the Deliver callback or after Run returned.
func (r *EventReader) Delivered() int64 { return r.delivered }

// Run polls until ctx is done (returning ctx's error), deliver returns
// ErrStopReading (nil), deliver returns another error for the fifth
// consecutive cycle, or five consecutive cycles fail (errPollFailed).
// deliver is called from Run's goroutine only, in sequence order.
func (r *EventReader) Run(ctx context.Context, deliver func(Event) error) error {
	var wake <-chan struct{}
	if r.opts.Watch != "" && !r.opts.PollOnly {
		w, err := WatchQueue(false, r.opts.Watch)
		if err != nil {
			// Polling alone still delivers everything, only later.
			r.opts.Logger.Warn("event watch unavailable; polling only", "err", err)
		} else {
			defer w.Close()
			wake = w.C
		}
	}
	timer := time.NewTimer(0) // the first cycle runs at once
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		case _, ok := <-wake:
			if !ok {
				wake = nil // the watch ended: the poll alone goes on
				continue
			}
			if r.failed > 0 {
				// A failing cycle is retried on the poll only, so five
				// failures take five poll periods, not one event burst.
				continue
			}
			timer.Stop() // Go ≥1.23: no stale tick is delivered after Stop
		}
		stop, err := r.Cycle(deliver)
		if err != nil {
			return err
		}
		if stop {
			return nil
		}
		timer.Reset(r.opts.Interval)
	}
}

// Cycle runs one poll cycle: it delivers the files present, in order, up to
// the first failure. stop reports that deliver asked to stop; err is
// non-nil only when the failure was the fatal fifth in a row
// (errPollFailed) or the directory is gone (ErrSessionGone, not retried).
// Run calls Cycle; it is exported for consumers that drive their own loop.
func (r *EventReader) Cycle(deliver func(Event) error) (stop bool, err error) {
	stop, cerr := r.cycle(deliver)
	if errors.Is(cerr, ErrSessionGone) {
		return false, cerr // nothing left to retry
	}
	if cerr == nil {
		r.failed = 0
		return stop, nil
	}
	r.failed++
	r.opts.Logger.Warn(fmt.Sprintf("%v: %v (attempt %d/%d)", errPollFailed, cerr, r.failed, maxFailedCycles),
		"attempt", r.failed)
	if r.failed >= maxFailedCycles {
		return false, fmt.Errorf("%w: %w", errPollFailed, cerr)
	}
	return false, nil
}

// eventFile is a listed event file.
type eventFile struct {
	name string
	seq  int64
}

// list returns the event files, in sequence order.
func (r *EventReader) list() ([]eventFile, error) {
	names, err := r.opts.FS.List()
	if err != nil {
		return nil, fmt.Errorf("list event files: %w", err)
	}
	files := make([]eventFile, 0, len(names))
	for _, n := range names {
		// pcwrap only writes 12-digit names; anything else is not ours.
		if seq, ok := ParseSeq(n); ok && seq > 0 && strings.HasSuffix(n, JSONSuffix) {
			files = append(files, eventFile{n, seq})
		}
	}
	sort.Slice(files, func(i, j int) bool {
		if files[i].seq != files[j].seq {
			return files[i].seq < files[j].seq
		}
		return files[i].name < files[j].name
	})
	return files, nil
}

// cycle delivers the listed files in sequence order. Unless AllowGaps, a
// file whose predecessor is missing is not delivered before a fresh
// listing: a directory read that takes several getdents calls returns
// entries in hash order (ext4), so a file created while it runs can be
// missing from it while a later one is there (seen with a backlog of a
// few hundred files); delivering the later one would pass over the
// other for good.
func (r *EventReader) cycle(deliver func(Event) error) (stop bool, err error) {
	files, err := r.list()
	if err != nil {
		return false, err
	}
	relists, relistedAt := 0, r.delivered
	for i := 0; i < len(files); i++ {
		f := files[i]
		if f.seq <= r.delivered {
			if !r.opts.Keep {
				r.remove(f.name)
			}
			continue
		}
		if f.seq != r.delivered+1 && !r.opts.AllowGaps {
			if r.delivered != relistedAt {
				relists, relistedAt = 0, r.delivered // delivered since: a new gap
			}
			if relists == maxGapRelists {
				return false, fmt.Errorf("%w: %s is not there, %s is", errEventGap, SeqName(r.delivered+1), f.name)
			}
			relists++
			if files, err = r.list(); err != nil {
				return false, err
			}
			i = -1
			continue
		}
		raw, err := r.read(f.name)
		if err != nil {
			return false, fmt.Errorf("read event file %s: %w", f.name, err)
		}
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return false, fmt.Errorf("parse event file %s: %w", f.name, errNotObject)
		}
		var dst []byte
		if r.opts.DataBuffer != nil {
			dst = r.opts.DataBuffer()
		}
		fr, err := frame.ParseFrameInto(raw, dst)
		if err != nil && !errors.Is(err, frame.ErrUnknownFrameType) {
			return false, fmt.Errorf("parse event file %s: %w", f.name, frameError(err))
		}
		derr := deliver(Event{Seq: f.seq, Name: f.name, Frame: fr, Raw: raw})
		if derr != nil && !errors.Is(derr, ErrStopReading) {
			return false, fmt.Errorf("deliver event file %s: %w", f.name, derr)
		}
		r.delivered = f.seq
		if !r.opts.Keep {
			r.remove(f.name)
		}
		if derr != nil {
			return true, nil
		}
	}
	return false, nil
}

// keepRawBuf is the largest Raw storage kept for the next file
// (ReuseRaw): a data frame of a 64 KiB read fits, a rare long error
// message does not stay pinned.
const keepRawBuf = 128 << 10

// read reads one event file, into the last file's storage with ReuseRaw.
func (r *EventReader) read(name string) ([]byte, error) {
	fs, ok := r.opts.FS.(eventReadIntoFS)
	if !r.opts.ReuseRaw || !ok {
		return r.opts.FS.Read(name)
	}
	b, err := fs.ReadInto(name, r.raw)
	if err == nil && cap(b) <= keepRawBuf {
		r.raw = b[:0]
	}
	return b, err
}

// remove deletes a consumed file; a failure is only a warning because the
// watermark already keeps the file from a second delivery.
func (r *EventReader) remove(name string) {
	if err := r.opts.FS.Remove(name); err != nil {
		r.opts.Logger.Warn("failed to remove processed event file "+name, "file", name, "err", err)
	}
}

// frameError rewords a frame decoding error so that no file content leaks
// into logs: a JSON syntax error keeps only its offset (encoding/json quotes
// the offending character); the other decode errors name no content.
func frameError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at offset %d", se.Offset)
	}
	return err
}
