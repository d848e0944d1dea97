package stdinpoll

import (
	"io"
	"sync"
)

// maxQueuedBytes is how many bytes may wait for the child's stdin before
// the reader leaves further files on disk (backpressure instead of
// unbounded memory). 512 KiB is 8 pipe buffers: enough to keep a fast
// child busy (the files left on disk are the rest of the queue), small
// enough for the 10 MiB peak-RSS target.
const maxQueuedBytes = 512 << 10

// freeBufs bounds the Feeder's free list of written payload buffers
// (Buffer): a few are enough to keep the reader from allocating and
// zeroing one per file; more would only pin memory.
const freeBufs = 4

// maxRecycled is the largest payload buffer kept for reuse: a 64 KiB chunk
// fits, a rare huge file does not pin its memory.
const maxRecycled = 128 << 10

// Feeder is the one ordered writer of the child's stdin (spec §6.3): the
// reader hands it chunks and never blocks on the pipe. End closes the
// pipe after the queued bytes; Drop (terminate) discards them and closes
// at once. Write errors (the child closed its stdin) are ignored and the
// rest is discarded.
type Feeder struct {
	w       io.WriteCloser
	onDrain func()

	// mu guards queue, queued, ended, dropped and closed; cond waits on it.
	mu      sync.Mutex
	cond    *sync.Cond
	queue   [][]byte
	queued  int
	ended   bool
	dropped bool
	closed  bool
	done    chan struct{}
	free    chan []byte
}

// NewFeeder starts the writer goroutine for w. onDrain, if set, is called
// (from the writer goroutine) when the queue falls below maxQueuedBytes
// after having been full.
func NewFeeder(w io.WriteCloser, onDrain func()) *Feeder {
	f := &Feeder{w: w, onDrain: onDrain, done: make(chan struct{}), free: make(chan []byte, freeBufs)}
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
// back from Buffer once written).
func (f *Feeder) Write(b []byte) {
	if len(b) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended || f.dropped {
		return
	}
	f.queue = append(f.queue, b)
	f.queued += len(b)
	f.cond.Signal()
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
	broken := false
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
		f.mu.Unlock()
		if !broken {
			if _, err := f.w.Write(b); err != nil {
				broken = true // child closed stdin or Drop closed the pipe
			}
		}
		if cap(b) <= maxRecycled {
			select {
			case f.free <- b[:0]:
			default:
			}
		}
		f.mu.Lock()
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
