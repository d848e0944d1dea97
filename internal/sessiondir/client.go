package sessiondir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// ShutdownAckWait is how long a stop waits for shutdownAck before removing
// the session directory anyway (spec §9.4, §10, §11:
// DEFAULT_PROCESS_SESSION_SHUTDOWN_WAIT_MS = 3000).
const ShutdownAckWait = 3000 * time.Millisecond

// ackPollInterval is the host's ack reader period (spec §11: 100 ms).
const ackPollInterval = 100 * time.Millisecond

// StdinEndExitWait is how long a stop waits, after stdinEnd, for the child
// to exit on its own (an exit frame, or the wrapper's lock released) before
// it writes shutdown, which terminates the child: a child that reads its
// stdin to the end (cat) gets to finish with its own exit code.
const StdinEndExitWait = 3000 * time.Millisecond

// SendWait is how long pcwrap send waits, by default, for a session that is
// starting (no directory or no stdin/ yet): a pcwrap just started in the
// background creates them within milliseconds.
const SendWait = 5 * time.Second

// sendPollInterval is how often a waiting send looks again.
const sendPollInterval = 50 * time.Millisecond

// Errors of the client half.
var (
	// errClientSymlink: a session control path is a symbolic link.
	errClientSymlink = errors.New("refusing a symbolic link on a process session control path")
	// errClientNotDir: a session control path is not a directory.
	errClientNotDir = errors.New("a process session control path is not a directory")
	// ErrSessionGone: the session directory (or events/) was removed or
	// replaced while a reader held it open.
	ErrSessionGone = errors.New("process session directory vanished")
	// errNotSessionDir: a directory given as a session dir holds no
	// stdin/ queue, so nothing may be written into it.
	errNotSessionDir = errors.New("not a process session directory (it has no stdin/ directory)")
	// ErrShutdownNotAcked: Stop saw no shutdownAck within its wait; the
	// directory was removed anyway.
	ErrShutdownNotAcked = errors.New("the wrapper did not acknowledge shutdown within 3000ms")
	// ErrSessionEnded: the session's pcwrap has exited (its .pcwrap.lock
	// is free), so nothing would ever read what a send queues.
	ErrSessionEnded = errors.New("its pcwrap has exited (.pcwrap.lock is free), so nothing would read the input")
)

// WaitSendTarget is CheckSendTarget for a session that may still be
// starting: while the directory or its stdin/ is missing it looks again
// every 50 ms, for at most wait. A session whose pcwrap has ended is
// ErrSessionEnded, at once.
func WaitSendTarget(ctx context.Context, sessionDir string, wait time.Duration) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(sendPollInterval)
	defer tick.Stop()
	for {
		err := CheckSendTarget(sessionDir)
		if err == nil {
			gone, gerr := WrapperGone(ctx, sessionDir)
			switch {
			case gerr != nil:
				return fmt.Errorf("check session: %w", gerr)
			case gone:
				return fmt.Errorf("session %s has ended: %w", sessionDir, ErrSessionEnded)
			}
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errNotSessionDir) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-deadline.C:
			return fmt.Errorf("%w (waited %s for it)", err, wait)
		case <-tick.C:
		}
	}
}

// CheckSendTarget reports whether sessionDir is a session directory a
// host-side writer (pcwrap send) may use, before anything is created in it:
// it must exist, be a directory and no symlink, and hold stdin/. A missing
// directory wraps os.ErrNotExist, one without stdin/ errNotSessionDir, so
// the caller can say which in plain words.
func CheckSendTarget(sessionDir string) error {
	root, err := openControlDir(sessionDir, "")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no session directory at %s: %w", sessionDir, syscall.ENOENT)
		}
		return err
	}
	root.Close()
	d, err := openControlDir(sessionDir, StdinDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", sessionDir, errNotSessionDir)
		}
		return err
	}
	return d.Close()
}

// StopOptions tune Stop. The zero value is the host's behaviour.
type StopOptions struct {
	// Writer writes the stdinEnd and shutdown files. Nil: Stop takes the
	// session's .pcwrap-stdin-seq counter (spec §10), as pcwrap stop does.
	Writer *Writer
	// AckWait overrides ShutdownAckWait (tests).
	AckWait time.Duration
	// ExitWait overrides StdinEndExitWait (tests).
	ExitWait time.Duration
	// OnNoAck, when set, runs after the wait expired and before the
	// directory is removed (pcwrap stop prints its warning there).
	OnNoAck func()
}

// Stop ends a session: it queues stdinEnd, waits up to StdinEndExitWait
// for the child to exit on its own (an exit frame in events/, or the
// wrapper's lock released), then queues shutdown on the same serial chain
// and waits up to 3000 ms for a shutdownAck in events/ (without events/,
// the stdout mode, until stdin/ holds no .json file, i.e. pcwrap consumed
// both; in either mode a released lock ends the wait too: the wrapper is
// gone and acknowledged whatever it was going to). It then removes the
// session directory without following symlinks. It sends no signal. Event
// files are read, not removed, so a concurrent consumer loses nothing.
// (The host, spec §9.4, writes shutdown at once; pcwrap stop waits first
// so that a child which ends on EOF is not terminated mid-work.)
//
// The directory is removed whenever it could be opened, even if a write
// failed or no ack came. Stop returns nil when acknowledged,
// ErrShutdownNotAcked when it removed the directory without an ack, or the
// first error.
func Stop(ctx context.Context, sessionDir string, opts StopOptions) error {
	root, err := openControlDir(sessionDir, "")
	if err != nil {
		return err
	}
	root.Close()
	wait := opts.AckWait
	if wait <= 0 {
		wait = ShutdownAckWait
	}
	exitWait := opts.ExitWait
	if exitWait <= 0 {
		exitWait = StdinEndExitWait
	}
	werr := queueStop(ctx, sessionDir, opts.Writer, exitWait)
	acked := false
	if werr == nil {
		acked = waitAck(ctx, sessionDir, wait)
	}
	if !acked && werr == nil && opts.OnNoAck != nil {
		opts.OnNoAck()
	}
	rerr := removeSessionDir(sessionDir)
	switch {
	case werr != nil:
		return werr
	case rerr != nil:
		return rerr
	case !acked:
		return ErrShutdownNotAcked
	}
	return nil
}

// queueStop writes stdinEnd, waits up to exitWait for the child's exit,
// then writes shutdown.
func queueStop(ctx context.Context, sessionDir string, w *Writer, exitWait time.Duration) error {
	if w == nil {
		c, err := LockSeqCounter(ctx, sessionDir)
		if err != nil {
			return err
		}
		defer c.Close()
		w, err = OpenWriter(sessionDir, c.Next(), WriterOptions{Reserve: c.Store})
		if err != nil {
			return err
		}
		defer w.Close()
	}
	if _, err := w.StdinEnd(ctx); err != nil {
		return err
	}
	pollUntil(ctx, exitWait, func(seen map[string]bool) bool {
		return hasFrame(sessionDir, frame.FrameExit, seen) || wrapperGone(ctx, sessionDir)
	})
	_, err := w.Shutdown(ctx)
	return err
}

// wrapperGone is WrapperGone with an error counting as "still there".
func wrapperGone(ctx context.Context, sessionDir string) bool {
	gone, err := WrapperGone(ctx, sessionDir)
	return err == nil && gone
}

// pollUntil calls done every 100 ms (and once at once) until it reports
// true, for at most wait; it reports whether done did. seen is the
// caller's memory of event files already read.
func pollUntil(ctx context.Context, wait time.Duration, done func(seen map[string]bool) bool) bool {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	seen := map[string]bool{}
	t := time.NewTicker(ackPollInterval)
	defer t.Stop()
	for {
		if done(seen) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// waitAck polls every 100 ms, for at most wait, for the stop to be
// acknowledged. exit and error frames do not shorten the wait (§9.4).
func waitAck(ctx context.Context, sessionDir string, wait time.Duration) bool {
	return pollUntil(ctx, wait, func(seen map[string]bool) bool {
		return acknowledged(sessionDir, seen) || wrapperGone(ctx, sessionDir)
	})
}

// acknowledged reports whether events/ holds a shutdownAck, or, without
// events/, whether stdin/ is drained. seen skips files already read.
func acknowledged(sessionDir string, seen map[string]bool) bool {
	if _, err := os.Lstat(filepath.Join(sessionDir, EventsDir)); errors.Is(err, os.ErrNotExist) {
		return stdinDrained(sessionDir)
	}
	return hasFrame(sessionDir, frame.FrameShutdownAck, seen)
}

// hasFrame reports whether events/ holds a frame of type typ. seen skips
// files already read (whatever their type); a missing events/ holds none.
func hasFrame(sessionDir, typ string, seen map[string]bool) bool {
	fs, err := OpenEventsDir(sessionDir)
	if err != nil {
		return false
	}
	defer fs.Close()
	names, err := fs.List()
	if err != nil {
		return false
	}
	found := false
	for _, n := range names {
		if seen[n] {
			continue
		}
		b, err := fs.Read(n)
		if err != nil {
			continue // maybe mid-removal by another consumer; retry next tick
		}
		seen[n] = true
		if f, err := frame.ParseFrame(b); err == nil && f.Type == typ {
			found = true
		}
	}
	return found
}

// stdinDrained reports whether stdin/ exists and holds no .json file.
func stdinDrained(sessionDir string) bool {
	d, err := openControlDir(sessionDir, StdinDir)
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false
	}
	for _, n := range names {
		if strings.HasSuffix(n, JSONSuffix) {
			return false
		}
	}
	return true
}

// removeSessionDir removes the directory tree without following symlinks:
// os.RemoveAll unlinks a symlink instead of descending into it, and walks
// with openat/unlinkat relative to held descriptors.
func removeSessionDir(sessionDir string) error {
	if err := os.RemoveAll(filepath.Clean(sessionDir)); err != nil {
		return fmt.Errorf("remove session dir: %w", err)
	}
	return nil
}

// TailOptions configure Tail.
type TailOptions struct {
	EventReaderOptions
	// Text prints a data frame's bytes as a JSON string "text" instead of
	// base64 "data" (pcwrap tail --text), so a reader sees the output
	// itself; invalid UTF-8 becomes U+FFFD there.
	Text bool
}

// Tail writes each event file of sessionDir, in sequence order, to out as
// one line {"seq":N,…frame} (the stdout-mode shape, spec §10) as it
// arrives, without removing anything. It returns nil after printing an exit
// frame and the files already present after it, ErrSessionGone if the
// directory vanishes, or ctx's error.
func Tail(ctx context.Context, sessionDir string, out io.Writer, opts TailOptions) error {
	fs, err := OpenEventsDir(sessionDir)
	if err != nil {
		return err
	}
	defer fs.Close()
	opts.Watch = filepath.Join(sessionDir, EventsDir)
	return tailWith(ctx, fs, out, opts)
}

// tailWith is Tail over a given events filesystem.
func tailWith(ctx context.Context, fs EventFS, out io.Writer, opts TailOptions) error {
	ropts := opts.EventReaderOptions
	ropts.FS = fs
	ropts.Keep = true
	ropts.AllowGaps = true // the consumer removes files before tail sees them
	r := NewEventReader(ropts)
	line := tailLine
	if opts.Text {
		line = tailTextLine
	}
	var werr error
	print := func(ev Event) error {
		if _, err := out.Write(line(ev)); err != nil {
			werr = fmt.Errorf("write event line: %w", err)
			return ErrStopReading
		}
		if ev.Frame.Type == frame.FrameExit {
			return ErrStopReading
		}
		return nil
	}
	if err := r.Run(ctx, print); err != nil {
		return fmt.Errorf("follow events: %w", err)
	}
	if werr != nil {
		return werr
	}
	// The exit frame was printed; print what is already there (typically
	// the shutdownAck) and end. A stop may have removed the directory
	// meanwhile: the session ended normally, so that is no error.
	if _, err := r.Cycle(func(ev Event) error {
		if _, err := out.Write(line(ev)); err != nil {
			return ErrStopReading
		}
		return nil
	}); err != nil && !errors.Is(err, ErrSessionGone) {
		return fmt.Errorf("follow events: %w", err)
	}
	return nil
}

// tailLine returns the event as one stdout-mode line: the file's JSON
// object with "seq" inserted first, then a newline. The body's own bytes are
// kept, so the line shows exactly what pcwrap wrote.
func tailLine(ev Event) []byte {
	body := bytes.TrimSpace(ev.Raw)
	line := make([]byte, 0, len(body)+24)
	line = append(line, `{"seq":`...)
	line = strconv.AppendInt(line, ev.Seq, 10)
	rest := bytes.TrimSpace(body[1:]) // ParseFrame accepted it: an object
	if len(rest) > 0 && rest[0] != '}' {
		line = append(line, ',')
	}
	line = append(line, rest...)
	return append(line, '\n')
}

// tailTextLine is tailLine with a data frame's payload as text:
// {"seq":N,"type":"data","stream":S,"text":"…"}.
func tailTextLine(ev Event) []byte {
	if ev.Frame.Type != frame.FrameData {
		return tailLine(ev)
	}
	b, err := jsonenc.Marshal(struct {
		Seq    int64  `json:"seq"`
		Type   string `json:"type"`
		Stream string `json:"stream"`
		Text   string `json:"text"`
	}{ev.Seq, ev.Frame.Type, ev.Frame.Stream, string(ev.Frame.Data)})
	if err != nil {
		return tailLine(ev)
	}
	return append(b, '\n')
}
