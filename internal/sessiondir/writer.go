package sessiondir

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// errSeqTaken reports that a stdin-queue file with the sequence number the
// writer was about to use already exists. The writer never overwrites it:
// another writer is active on the session, or the caller's durable counter
// is behind (spec §6.4: a writer MUST NOT reuse a sequence number).
var errSeqTaken = errors.New("stdin sequence number already used")

// errWriterClosed is returned by writes after Close.
var errWriterClosed = errors.New("stdin writer closed")

// tmpSuffix ends every temporary sibling; it never ends in ".json", so the
// reader (spec §6.2) never lists a half-written file.
const tmpSuffix = ".pcwrap-write.tmp"

// stdinFileMode is the mode of stdin-queue files: the payload may carry
// prompts and credentials, so only the session owner reads it.
const stdinFileMode = 0o600

// bodyPool recycles the buffers stdin-file bodies are encoded into: a
// fresh ~87 KiB buffer per 64 KiB chunk cost the writer an allocation,
// its zeroing and page faults per file, about a sixth of the test
// writer's CPU in the pcwrap round trip. A sync.Pool, not a buffer per
// Writer, so idle sessions pin nothing and concurrent writes need no
// extra lock.
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody is the largest body buffer put back: a 64 KiB chunk in
// base64 with its JSON fits, a rare huge message does not stay pinned.
const maxPooledBody = 128 << 10

// encodeBody encodes m into a pooled buffer; release returns it, after
// which body must not be used.
func encodeBody(m frame.Message) (body []byte, release func()) {
	bp := bodyPool.Get().(*[]byte)
	body = m.AppendJSON((*bp)[:0])
	if cap(body) <= maxPooledBody {
		*bp = body
	}
	return body, func() { bodyPool.Put(bp) }
}

// WriterOptions tune a Writer.
type WriterOptions struct {
	// Reserve, when set, is called with each sequence number before its file
	// is started, under the writer's lock; runnerd records the number
	// durably here (acp.md §3.2), pcwrap send stores it in .pcwrap-stdin-seq
	// (§10). An error aborts the write. After a failed write the same number
	// is reserved again by the next attempt (it never reached the queue).
	Reserve func(seq int64) error
}

// Writer writes stdin-queue files for one session (spec §6.4). Each file is
// written under a temporary sibling name and then renamed with
// RENAME_NOREPLACE through a held directory descriptor, so it appears under
// its final name only complete and never replaces a file. Writes are
// serialized: file N's rename completes before file N+1 is started. A Writer
// is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex // serialises the files; guards dir and next
	dir  *os.File   // held stdin/ directory; nil after Close
	next int64      // sequence number of the next file
	opts WriterOptions
}

// OpenWriter opens the stdin/ directory of sessionDir without following
// symlinks and returns a Writer whose first file gets sequence number next
// (1 for a fresh session). next is the caller's durable counter.
func OpenWriter(sessionDir string, next int64, opts WriterOptions) (*Writer, error) {
	if next == 0 {
		return nil, fmt.Errorf("open stdin writer: sequence numbers start at 1")
	}
	dir, err := openControlDir(sessionDir, StdinDir)
	if err != nil {
		return nil, fmt.Errorf("open stdin writer: %w", err)
	}
	return &Writer{dir: dir, next: next, opts: opts}, nil
}

// Next returns the sequence number the next file will get.
func (w *Writer) Next() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// Close releases the directory descriptor. Later writes fail.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dir == nil {
		return nil
	}
	err := w.dir.Close()
	w.dir = nil
	return err
}

// Stdin queues raw bytes for the child's stdin and returns the file's
// sequence number.
func (w *Writer) Stdin(ctx context.Context, data []byte) (int64, error) {
	return w.Write(ctx, frame.Message{Type: frame.MsgStdin, Data: data})
}

// StdinEnd queues the message that closes the child's stdin.
func (w *Writer) StdinEnd(ctx context.Context) (int64, error) {
	return w.Write(ctx, frame.Message{Type: frame.MsgStdinEnd})
}

// Shutdown queues the message that makes pcwrap terminate the child.
func (w *Writer) Shutdown(ctx context.Context) (int64, error) {
	return w.Write(ctx, frame.Message{Type: frame.MsgShutdown})
}

// Write queues one message and returns its sequence number. The context is
// checked before the write starts; a started write runs to completion so
// the queue never holds a half-published file.
func (w *Writer) Write(ctx context.Context, m frame.Message) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("write stdin file: %w", err)
	}
	body, release := encodeBody(m)
	defer release()
	return w.writeBody(body)
}

// WriteBody queues one file whose whole content the caller encoded, for
// writers of another JSON form than JSON.stringify's (a test of Python
// json.dumps's spaced form, a script): the sequence number, the
// temporary file and its publication are exactly Write's. body is not
// checked; pcwrap judges it as any stdin file (§6.1, §6.3).
func (w *Writer) WriteBody(ctx context.Context, body []byte) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("write stdin file: %w", err)
	}
	return w.writeBody(body)
}

func (w *Writer) writeBody(body []byte) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dir == nil {
		return 0, fmt.Errorf("write stdin file: %w", errWriterClosed)
	}
	seq := w.next
	if w.opts.Reserve != nil {
		if err := w.opts.Reserve(seq); err != nil {
			return 0, fmt.Errorf("reserve stdin seq %d: %w", seq, err)
		}
	}
	if err := publish(w.dir, SeqName(seq), body); err != nil {
		// Nothing appeared under the final name (rename is atomic), so the
		// number stays free for the next attempt; skipping it would leave a
		// gap that pcwrap reports as lost input after its retry budget.
		return 0, fmt.Errorf("write stdin file %s: %w", SeqName(seq), err)
	}
	w.next = seq + 1
	return seq, nil
}

// Staged is a stdin file written completely under its temporary name but
// not yet published under its final name (Seq): pcwrap cannot see it.
// runnerd records Tmp with the sequence reservation, so a restart can
// tell a published file from one that never reached the queue (prp.md
// §7.2 item 8).
type Staged struct {
	Seq int64
	Tmp string
}

// StageStdin writes raw bytes for the child's stdin as file seq, under a
// temporary name only. seq is at or after Next: the files before it are
// written first, then Publish makes this one visible.
func (w *Writer) StageStdin(data []byte, seq int64) (Staged, error) {
	body, release := encodeBody(frame.Message{Type: frame.MsgStdin, Data: data})
	defer release()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dir == nil {
		return Staged{}, fmt.Errorf("stage stdin file: %w", errWriterClosed)
	}
	if seq < w.next {
		return Staged{}, fmt.Errorf("stage stdin file %s: %w", SeqName(seq), errSeqTaken)
	}
	tmp, err := stage(w.dir, SeqName(seq), body)
	if err != nil {
		return Staged{}, fmt.Errorf("stage stdin file %s: %w", SeqName(seq), err)
	}
	return Staged{Seq: seq, Tmp: tmp}, nil
}

// NewStaged names a stdin file to be staged as seq later (StageStdinAs):
// a caller that records the temporary name in the same write that
// reserves seq knows it before the file is written.
func NewStaged(seq int64) (Staged, error) {
	tmp, err := tmpName(SeqName(seq))
	if err != nil {
		return Staged{}, fmt.Errorf("name staged stdin file %s: %w", SeqName(seq), err)
	}
	return Staged{Seq: seq, Tmp: tmp}, nil
}

// StageStdinAs is StageStdin under the name s (from NewStaged).
func (w *Writer) StageStdinAs(data []byte, s Staged) error {
	body, release := encodeBody(frame.Message{Type: frame.MsgStdin, Data: data})
	defer release()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dir == nil {
		return fmt.Errorf("stage stdin file: %w", errWriterClosed)
	}
	if s.Seq < w.next {
		return fmt.Errorf("stage stdin file %s: %w", SeqName(s.Seq), errSeqTaken)
	}
	if err := stageAs(w.dir, s.Tmp, body); err != nil {
		return fmt.Errorf("stage stdin file %s: %w", SeqName(s.Seq), err)
	}
	return nil
}

// Publish renames a staged file to its final name. It must be the next
// file of the queue. On failure the staged file stays, so a restart still
// sees it unpublished, and its number stays free; the caller records the
// failure, then Discards it.
func (w *Writer) Publish(s Staged) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dir == nil {
		return 0, fmt.Errorf("publish stdin file: %w", errWriterClosed)
	}
	if s.Seq != w.next {
		return 0, fmt.Errorf("publish stdin file %s: next is %s", SeqName(s.Seq), SeqName(w.next))
	}
	if err := rename(w.dir, s.Tmp, SeqName(s.Seq)); err != nil {
		return 0, fmt.Errorf("publish stdin file %s: %w", SeqName(s.Seq), err)
	}
	w.next = s.Seq + 1
	return s.Seq, nil
}

// Discard removes a staged file that will never be published.
func (w *Writer) Discard(s Staged) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dir == nil {
		return fmt.Errorf("discard stdin file: %w", errWriterClosed)
	}
	return removeStaged(w.dir, s.Tmp)
}

// delivery is where a staged file stands after a restart (prp.md §7.2
// item 8).
type delivery int

// Deliveries of a staged file.
const (
	// published: the final name is present, or both names are gone (pcwrap
	// consumed it).
	published delivery = iota + 1
	// Unpublished: the temporary file is still there; it never reached
	// the queue.
	Unpublished
)

// Locate reports whether a staged file was published.
func (w *Writer) Locate(s Staged) (delivery, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dir == nil {
		return 0, fmt.Errorf("locate stdin file: %w", errWriterClosed)
	}
	tmp, err := present(w.dir, s.Tmp)
	if err != nil {
		return 0, fmt.Errorf("locate stdin file: %w", err)
	}
	if tmp {
		return Unpublished, nil
	}
	return published, nil
}

// tmpName returns a fresh temporary sibling name for final.
func tmpName(final string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	return final + "." + hex.EncodeToString(b[:]) + tmpSuffix, nil
}
