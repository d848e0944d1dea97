package stdinpoll

import (
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxQueuedBytes is how many bytes may wait for the child's stdin before
// the reader leaves further files on disk (backpressure instead of
// unbounded memory). 512 KiB is 8 pipe buffers: enough to keep a fast
// child busy (the files left on disk are the rest of the queue), small
// enough for the 10 MiB peak-RSS target.
const maxQueuedBytes = 512 << 10

// freeBufs bounds the Feeder's free list of written payload buffers
// (Buffer): as many 64 KiB chunks as the queue holds (maxQueuedBytes),
// and two more for the one in flight and the one being decoded, so a
// queue that fills and drains again hands every buffer back instead of
// leaving some to the collector and allocating anew. On one P (pcwrap's
// main) the reader fills the queue before the writer runs, and with 4
// the churn made the heap overshoot: peak RSS in the round trip rose by
// about 1.5 MiB.
const freeBufs = maxQueuedBytes/(64<<10) + 2

// maxRecycled is the largest payload buffer kept for reuse: a 64 KiB chunk
// fits, a rare huge file does not pin its memory.
const maxRecycled = 128 << 10

// pipeBytes is the size the Feeder asks for the child's stdin pipe
// (F_SETPIPE_SZ): four 64 KiB chunks, so a chunk goes into the pipe while
// the child still reads the one before instead of the write stalling on
// a full 64 KiB pipe and costing a park and a wake-up per chunk. 64 pages
// a pipe keeps a user far below the kernel's default soft limit
// (pipe-user-pages-soft, 16384 pages) with hundreds of sessions.
const pipeBytes = 256 << 10

// Feeder is the one ordered writer of the child's stdin (spec §6.3): the
// reader hands it chunks and never blocks on the pipe. End closes the
// pipe after the queued bytes; Drop (terminate) discards them and closes
// at once. Write errors (the child closed its stdin) are ignored and the
// rest is discarded.
type Feeder struct {
	w       io.WriteCloser
	raw     syscall.RawConn // w's descriptor when w is a pipe, for Write's direct attempt; else nil
	onDrain func()

	// mu guards queue, queued, ended, dropped, closed, writing and
	// broken; cond waits on it.
	mu      sync.Mutex
	cond    *sync.Cond
	queue   [][]byte
	queued  int
	ended   bool
	dropped bool
	closed  bool
	writing bool // the writer goroutine has a chunk in flight
	broken  bool // a write failed: the rest is discarded
	done    chan struct{}
	free    chan []byte
}

// NewFeeder starts the writer goroutine for w. onDrain, if set, is called
// (from the writer goroutine) when the queue falls below maxQueuedBytes
// after having been full.
func NewFeeder(w io.WriteCloser, onDrain func()) *Feeder {
	f := &Feeder{w: w, onDrain: onDrain, done: make(chan struct{}), free: make(chan []byte, freeBufs)}
	if file, ok := w.(*os.File); ok {
		if raw, err := file.SyscallConn(); err == nil {
			// Best effort: a smaller pipe only costs more wake-ups.
			_ = raw.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeBytes) })
			f.raw = raw
		}
	}
	f.cond = sync.NewCond(&f.mu)
	go f.loop()
	return f
}

// Buffer returns an empty buffer whose storage the Feeder has written and
// no longer needs, for the next payload (nil when none is free).
func (f *Feeder) Buffer() []byte {
	select {
	case b := <-f.free:
		return b
	default:
		return nil
	}
}

// Write queues b (owned by the Feeder from now on; its storage may come
// back from Buffer once written). When nothing is queued or in flight it
// first writes what the pipe takes at once, without waiting: a chunk
// that fits then costs no hand-off to the writer goroutine, which is a
// wake-up of another thread per chunk (on a busy machine, the larger
// part of pcwrap's cost per stdin file after the decoding itself).
func (f *Feeder) Write(b []byte) {
	if len(b) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended || f.dropped {
		return
	}
	if len(f.queue) == 0 && !f.writing && !f.broken && f.raw != nil {
		n := f.writeNow(b)
		if n == len(b) {
			f.recycle(b)
			return
		}
		b = b[n:]
	}
	f.queue = append(f.queue, b)
	f.queued += len(b)
	f.cond.Signal()
}

// writeNow writes what of b the pipe takes without blocking (it never
// waits for room, so Write may call it holding mu) and returns how much;
// a failure other than a full pipe marks the Feeder broken, as the
// writer goroutine's would.
func (f *Feeder) writeNow(b []byte) int {
	n := 0
	var werr error
	err := f.raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := unix.Write(int(fd), b[n:])
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				if err != unix.EAGAIN {
					werr = err
				}
				break
			}
			n += m
		}
		return true // done either way: the rest goes to the writer goroutine
	})
	if err != nil || werr != nil {
		f.broken = true // child closed stdin, or the pipe is closed
	}
	return n
}

// recycle offers a written buffer to Buffer.
func (f *Feeder) recycle(b []byte) {
	if cap(b) <= maxRecycled {
		select {
		case f.free <- b[:0]:
		default:
		}
	}
}

// SetOnDrain sets the callback of NewFeeder's onDrain.
func (f *Feeder) SetOnDrain(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onDrain = fn
}

// Full reports whether maxQueuedBytes or more wait for the child.
func (f *Feeder) Full() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queued >= maxQueuedBytes
}

// End closes the child's stdin once the queued bytes are written.
func (f *Feeder) End() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = true
	f.cond.Signal()
}

// Drop discards queued bytes and closes the pipe now, unblocking a write
// in progress.
func (f *Feeder) Drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped = true
	f.queue, f.queued = nil, 0
	f.closeLocked()
	f.cond.Signal()
}

// Done is closed when the writer goroutine has exited.
func (f *Feeder) Done() <-chan struct{} { return f.done }

func (f *Feeder) closeLocked() {
	if !f.closed {
		f.closed = true
		_ = f.w.Close()
	}
}

func (f *Feeder) loop() {
	defer close(f.done)
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		for len(f.queue) == 0 && !f.ended && !f.dropped {
			f.cond.Wait()
		}
		if f.dropped || len(f.queue) == 0 {
			f.closeLocked()
			return
		}
		b := f.queue[0]
		f.queue[0] = nil
		f.queue = f.queue[1:]
		broken := f.broken
		f.writing = true
		f.mu.Unlock()
		var err error
		if !broken {
			_, err = f.w.Write(b)
		}
		f.recycle(b)
		f.mu.Lock()
		f.writing = false
		if err != nil {
			f.broken = true // child closed stdin or Drop closed the pipe
		}
		// Full is judged now, not before the write: the reader may have
		// filled the queue (and stopped, waiting for onDrain) while the
		// write was in flight.
		wasFull := f.queued >= maxQueuedBytes
		if !f.dropped {
			f.queued -= len(b)
		}
		if fn := f.onDrain; wasFull && f.queued < maxQueuedBytes && fn != nil {
			f.mu.Unlock()
			fn()
			f.mu.Lock()
		}
	}
}
