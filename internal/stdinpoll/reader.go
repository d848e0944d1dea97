// Package stdinpoll reads pcwrap's stdin queue (spec pcwrap-protocol.md
// §6): sequence-numbered JSON files in <sessionDir>/stdin/, delivered in
// strict order, with bounded retries for unreadable files and gaps and a
// loud give-up. An fsnotify watch gives latency; a 50 ms tick is the
// safety net and the only thing that spends the retry budget.
package stdinpoll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// TickInterval is the pause after a tick scan before the next (spec §6.3, §11).
const TickInterval = 50 * time.Millisecond

// idleTickInterval spaces tick scans while the queue is empty and inotify
// is live (beyond the reference: each wake-up of the Go runtime costs a
// handful of context switches, and 100 of them would exceed the 10 ms
// CPU budget for 5 idle seconds). An inotify event, an overflow or Kick
// scans at once and, when it finds any file, returns to TickInterval, so
// the retry budget is still spent at 50 ms per tick and give-up timing is
// unchanged. The identity check then runs at least every 500 ms; removal
// of stdin/ also arrives as an inotify event.
const idleTickInterval = 500 * time.Millisecond

// DefaultMaxRetries is the retry budget in tick scans (spec §2.2, §11).
const DefaultMaxRetries = 100

// maxFileBytes caps one stdin file. The host writes one ACP line per file;
// 16 MiB holds a prompt with several inline images while keeping pcwrap's
// memory bounded. A larger file is unreadable: retried, then dropped with
// a message that names the cap, never the content.
const maxFileBytes = 16 << 20

// Handler receives the effects of the queue, in file order, from the
// reader goroutine. Calls must not block for long.
type Handler interface {
	// Stdin queues bytes for the child's stdin.
	Stdin(data []byte)
	// StdinEnd closes the child's stdin after queued bytes.
	StdinEnd()
	// Shutdown runs terminate(); the reader stops after it.
	Shutdown()
	// Error emits an error frame.
	Error(msg string)
}

// Config configures a Reader.
type Config struct {
	// Dir is the held stdin/ directory fd; names are opened relative to it.
	Dir *os.File
	// MaxRetries is the retry budget in tick scans; <= 0 means DefaultMaxRetries.
	MaxRetries int
	// Verify re-checks the session identity before each scan (spec §5.3);
	// false means the identity is lost and pcwrap is terminating.
	Verify func() bool
	// Lost is called when listing stdin/ fails with ENOENT or ENOTDIR
	// (latch and terminate, spec §6.3 step 2).
	Lost func()
	// ShuttingDown reports whether terminate() ran; scans stop then.
	ShuttingDown func() bool
	// Backlogged reports whether the child's stdin queue is full; a scan
	// then leaves the remaining files on disk (no retry is spent) until
	// Kick is called. nil means never.
	Backlogged func() bool
	// Buffer returns a recycled buffer for the next stdin payload
	// (Feeder.Buffer), or nil; the payload is decoded into it when it is
	// large enough. nil means always allocate.
	Buffer  func() []byte
	Handler Handler
	Logger  *slog.Logger
	// NoWatch disables inotify: tick scans alone drive the queue.
	NoWatch bool
}

// Reader is the stdin-queue state machine of spec §6.3. Scans never run
// concurrently: Run is the only caller of scan.
type Reader struct {
	cfg         Config
	maxRetries  int
	expectedSeq float64 // a JavaScript number, as in the reference (seqOf)
	gapRetries  int
	parseRetry  map[string]int
	// undeletable holds names dropped (given up) whose unlink failed: they
	// are skipped from then on, so the queue still advances and the drop
	// is reported once. An entry goes when a fresh listing lacks its name.
	undeletable map[string]struct{}
	unlink      func(dfd int, name string) error // unix.Unlinkat; a seam for tests
	stdinClosed bool
	stopped     bool
	kick        chan struct{}
	names       []string
	dirbuf      []byte
	filebuf     []byte
	spare       []byte   // payload buffer for the next stdin message
	resume      []string // rest of a listing left while backlogged (Scan)
}

// dirBufSize is the getdents buffer: the size glibc's readdir uses
// (32 KiB), so a queue of a few hundred files lists in one call.
const dirBufSize = 32 << 10

// keepFileBuf is the largest read buffer kept between files: a 64 KiB
// chunk in base64 with its JSON wrapper fits, a rare huge file does not
// pin its memory.
const keepFileBuf = 128 << 10

// New returns a Reader in its initial state (expectedSeq 1).
func New(cfg Config) *Reader {
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = DefaultMaxRetries
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Verify == nil {
		cfg.Verify = func() bool { return true }
	}
	if cfg.Lost == nil {
		cfg.Lost = func() {}
	}
	if cfg.ShuttingDown == nil {
		cfg.ShuttingDown = func() bool { return false }
	}
	return &Reader{
		cfg:         cfg,
		maxRetries:  cfg.MaxRetries,
		expectedSeq: 1,
		parseRetry:  map[string]int{},
		undeletable: map[string]struct{}{},
		unlink:      func(dfd int, name string) error { return unix.Unlinkat(dfd, name, 0) },
		kick:        make(chan struct{}, 1),
		dirbuf:      make([]byte, dirBufSize),
	}
}

// Kick asks for an event scan soon (for example after the child's stdin
// queue drained). It never blocks.
func (r *Reader) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run scans until ctx is done, a shutdown message was acted on, or pcwrap
// is shutting down. Tick scans run TickInterval after the previous tick
// scan completed; inotify events, an overflow and Kick trigger event scans
// in between, which never spend the retry budget.
//
// The watch's events come to this loop itself, not through a goroutine
// that filters them: a stdin file brings about five, and a hand-off to
// another goroutine per event was a good part of pcwrap's cost per file
// when the writer is slower than the reader (each file then wakes it).
func (r *Reader) Run(ctx context.Context) {
	var (
		w        watch
		watching bool
	)
	if !r.cfg.NoWatch && !hookNoInotify() {
		// The held fd's /proc path first, so a later swap of the path
		// cannot redirect the watch. The test hook loses every event as
		// in an overflow (scenario 60).
		dir := r.cfg.Dir
		if qw, err := sessiondir.WatchQueueEvents(hookLoseEvent(), fmt.Sprintf("/proc/self/fd/%d", dir.Fd()), dir.Name()); err != nil {
			r.cfg.Logger.Warn("stdin queue: inotify unavailable; polling only", "err", err)
		} else {
			defer qw.Close()
			w, watching = watch{qw, qw.Events, qw.Errors}, true
		}
	}
	r.Scan(false)
	tick := time.NewTimer(TickInterval)
	defer tick.Stop()
	idle := false
	for !r.Done() {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.events:
			scan := !ok
			if ok {
				scan = w.Wakes(ev)
			} else {
				w.events = nil
			}
			if !w.drain() && !scan {
				continue
			}
			if !w.live() {
				w, watching = watch{}, false // the watch ended: ticks alone
			}
			r.Scan(false)
		case err, ok := <-w.errors:
			if !ok {
				w.errors = nil // the end of events says the watch ended
				continue
			}
			wakes := w.ErrorWakes(err)
			if !w.drain() && !wakes {
				continue
			}
			if !w.live() {
				w, watching = watch{}, false
			}
			r.Scan(false)
		case <-r.kick:
			r.Scan(false)
		case <-tick.C:
			r.Scan(true)
			idle = watching && !r.pending()
			if idle {
				tick.Reset(idleTickInterval)
			} else {
				tick.Reset(TickInterval)
			}
			continue
		}
		if idle && r.pending() {
			idle = false
			tick.Reset(TickInterval)
		}
	}
}

// watch is the reader's side of its queue watch: nil channels (which
// never deliver) when there is none.
type watch struct {
	waker
	events <-chan fsnotify.Event
	errors <-chan error
}

// waker judges a watch's events (sessiondir's queue watch).
type waker interface {
	Wakes(fsnotify.Event) bool
	ErrorWakes(error) bool
}

// drain takes the events already waiting and reports whether any calls
// for a scan, so one scan answers a burst (a scan lists the directory
// after every one of them happened). It stops at the watch's end, which
// live then reports.
func (w *watch) drain() bool {
	scan := false
	for w.events != nil {
		select {
		case ev, ok := <-w.events:
			if !ok {
				w.events = nil
				return true // the watch ended: scan once, then ticks alone
			}
			scan = w.Wakes(ev) || scan
		default:
			return scan
		}
	}
	return scan
}

// live reports whether the watch still delivers events.
func (w *watch) live() bool { return w.events != nil }

// pending reports whether the last scan saw queue files or holds retry
// state, i.e. whether tick scans must come every TickInterval.
func (r *Reader) pending() bool {
	return len(r.names) > 0 || len(r.parseRetry) > 0 || r.gapRetries > 0
}

// Done reports whether the reader has stopped for good (shutdown message
// acted on, or pcwrap shutting down).
func (r *Reader) Done() bool { return r.stopped || r.cfg.ShuttingDown() }

// Scan runs one scan (spec §6.3); tick selects a tick scan, the only kind
// that spends the retry budget and gives up.
//
// A scan stopped only because the child's stdin queue was full keeps the
// rest of its listing, and the next scan (the Kick when the queue drains,
// or an event) goes on from there instead of listing stdin/ again: with
// hundreds of files waiting, a listing per drain made the reader's cost
// grow with the square of the backlog. The kept names are still in order
// and the first has passed the gap check; whatever arrived since either
// sorts after them or is a late file (seq < expectedSeq), which §6.3
// accepts in any order. Anything a kept listing could get wrong (a gap,
// an unreadable file) is decided on a fresh listing instead, and a kept
// listing that runs out is followed by a fresh one in the same scan.
func (r *Reader) Scan(tick bool) {
	if r.Done() {
		return
	}
	if !r.cfg.Verify() {
		return
	}
	names, fresh := r.resume, false
	r.resume = nil
	for {
		if names == nil {
			var err error
			if names, err = r.list(); err != nil {
				if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
					r.cfg.Lost()
				} else {
					r.cfg.Logger.Warn("stdin queue: list failed; retrying next scan", "err", err)
				}
				return
			}
			fresh = true
			r.pruneUndeletable(names)
		}
		switch r.scanNames(names, tick, fresh) {
		case scanDone:
			if fresh {
				return
			}
		case scanStopped:
			return
		}
		names = nil // relist: the kept listing ran out or went stale
	}
}

// pruneUndeletable forgets undeletable names that a fresh listing no
// longer has, so the set stays as small as what is on disk.
func (r *Reader) pruneUndeletable(names []string) {
	for name := range r.undeletable {
		if i := sort.SearchStrings(names, name); i == len(names) || names[i] != name {
			delete(r.undeletable, name)
		}
	}
}

// scanResult is how scanNames ended.
type scanResult int

const (
	scanDone    scanResult = iota // every name handled
	scanStopped                   // stopped as §6.3 says, or kept the rest (r.resume)
	scanStale                     // a kept listing met a gap or a failed read: relist
)

// scanNames runs step 3 of §6.3 over names; fresh says names is this
// scan's own listing (else it was kept from an earlier scan).
func (r *Reader) scanNames(names []string, tick, fresh bool) scanResult {
	for i, name := range names {
		if r.Done() {
			return scanStopped
		}
		if _, skip := r.undeletable[name]; skip {
			continue
		}
		seq, numeric := seqOf(name)
		if numeric && seq > r.expectedSeq {
			if !fresh {
				return scanStale // the missing file may have arrived since
			}
			if tick {
				r.gapRetries++
			}
			if !tick || r.gapRetries < r.maxRetries {
				return scanStopped
			}
			r.cfg.Handler.Error(fmt.Sprintf("Advanced past missing stdin files %s to %s after %d retries.", jsNumber(r.expectedSeq), jsNumber(seq-1), r.maxRetries))
			r.gapRetries = 0
			r.expectedSeq = seq
		}
		if r.cfg.Backlogged != nil && r.cfg.Backlogged() {
			r.resume = names[i:]
			return scanStopped // Kick resumes; nothing spent
		}
		msg, err := r.read(name)
		if err != nil {
			if !fresh {
				return scanStale // maybe gone since the listing
			}
			if !tick {
				return scanStopped
			}
			retries := r.parseRetry[name] + 1
			if retries < r.maxRetries {
				r.parseRetry[name] = retries
				return scanStopped // a later file must never overtake this one
			}
			delete(r.parseRetry, name)
			if err := r.unlink(int(r.cfg.Dir.Fd()), name); err != nil && !errors.Is(err, unix.ENOENT) {
				r.undeletable[name] = struct{}{}
			}
			r.cfg.Handler.Error(fmt.Sprintf("Dropped unreadable stdin file after %d retries: %s: %s", r.maxRetries, name, err))
			if numeric {
				r.expectedSeq = seq + 1
			}
			r.gapRetries = 0
			continue
		}
		delete(r.parseRetry, name)
		if numeric {
			r.expectedSeq = seq + 1
		}
		r.gapRetries = 0
		switch msg.Type {
		case frame.MsgStdin:
			if !r.stdinClosed && !msg.BadData {
				r.spare = nil // the payload (maybe in spare) now belongs to the Handler
				r.cfg.Handler.Stdin(msg.Data)
			}
		case frame.MsgStdinEnd:
			if !r.stdinClosed {
				r.stdinClosed = true
				r.cfg.Handler.StdinEnd()
			}
			return scanStopped
		case frame.MsgShutdown:
			r.stopped = true
			r.cfg.Handler.Shutdown()
			return scanStopped
		}
	}
	return scanDone
}
