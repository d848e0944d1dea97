package pcwrap

import (
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// eventRetryInterval paces retries of a failed event-file write (the
// host's 100 ms poll interval). A full or read-only filesystem pauses the
// output instead of losing it: the emitter retries until the write
// succeeds or pcwrap shuts down (failFast), and meanwhile the pumps, and
// so the child's writes, block. Shutdown stays possible, since reading
// and deleting stdin files needs no space.
const eventRetryInterval = 100 * time.Millisecond

// emitQueue is the frame channel's capacity: pumps block (backpressure on
// the child's pipes) rather than grow memory when output is slow. 8 full
// pipe reads are 512 KiB in flight, and the child's pipe buffers hold
// more: enough to ride out a slow consumer write, small enough for the
// 10 MiB peak-RSS target.
const emitQueue = 8

// freeBufs bounds the free list of data buffers (dataBuffer): the queue's
// worth plus one per pump in flight.
const freeBufs = emitQueue + 4

// queued is one frame in the channel; owned marks Data as a dataBuffer
// buffer to recycle once written.
type queued struct {
	f     frame.Frame
	owned bool
}

// emitter writes frames in emission order (spec §7): as event files
// (§7.2) or as stdout lines with seq first (§7.3). One counter from 1
// numbers all frames. Frames go through a queue to one goroutine, except
// that a data frame emitted while nothing is queued or being written is
// written by the emitting pump itself: a line the child writes while
// pcwrap is idle then reaches its file without a goroutine hand-off (a
// wake-up of the emitter measured ~40-80 µs on the agent
// path). Control frames (Emit) always queue, so a caller that must not
// block on a slow consumer (shutdown's ack) never writes.
type emitter struct {
	stdout   io.Writer
	eventsfd int
	files    *sessiondir.EventFiles // events mode
	events   bool
	log      *slog.Logger

	// mu guards closed and the closing of ch: an emit sends on ch holding
	// it shared, Close closes ch holding it exclusively.
	mu     sync.RWMutex
	closed bool
	ch     chan queued
	done   chan struct{}
	free   chan []byte // recycled data buffers (dataBuffer, emitData)

	brokenOnce sync.Once
	broken     chan struct{}
	fastOnce   sync.Once
	fast       chan struct{}

	// queued counts frames in ch or being written by loop; a pump writes
	// inline only while it is 0, so nothing overtakes a queued frame.
	queued atomic.Int64
	// wmu is held across each write; it guards the fields below.
	wmu  sync.Mutex
	dead bool // stdout broke: later frames are discarded
	seq  int64
	buf  []byte
}

// newStdoutEmitter writes frames as JSON lines to w, one Write per line.
func newStdoutEmitter(w io.Writer, log *slog.Logger) *emitter {
	return newEmitter(&emitter{stdout: w, log: log})
}

// newEventsEmitter writes frames as event files in the held events dir.
func newEventsEmitter(events *os.File, log *slog.Logger) *emitter {
	fd := int(events.Fd())
	return newEmitter(&emitter{eventsfd: fd, files: sessiondir.NewEventFiles(fd), events: true, log: log})
}

func newEmitter(e *emitter) *emitter {
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.ch = make(chan queued, emitQueue)
	e.free = make(chan []byte, freeBufs)
	e.done = make(chan struct{})
	e.broken = make(chan struct{})
	e.fast = make(chan struct{})
	go e.loop()
	return e
}

// Emit queues f. It blocks only while the queue is full; after Close it
// drops f.
func (e *emitter) Emit(f frame.Frame) { e.emit(queued{f: f}) }

// dataBuffer returns a buffer of size bytes to read child output into and
// hand to emitData: a recycled one when one is free, so a pump does not
// allocate and zero a fresh buffer per read.
func (e *emitter) dataBuffer(size int) []byte {
	select {
	case b := <-e.free:
		if cap(b) >= size {
			return b[:size]
		}
	default:
	}
	return make([]byte, size)
}

// emitData emits a data frame of b and takes b over: its storage is
// reused by dataBuffer once the frame is written, so the caller must not
// touch b again. The frame is the same as Emit(DataFrame(stream, b)), but
// when nothing is queued the caller writes it (see emitter).
func (e *emitter) emitData(stream string, b []byte) {
	q := queued{f: frame.DataFrame(stream, b), owned: true}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return
	}
	if e.queued.Load() == 0 && e.wmu.TryLock() {
		// Re-checked under wmu: a frame queued since the first look must
		// be written first.
		if e.queued.Load() == 0 {
			e.writeLocked(q)
			e.wmu.Unlock()
			return
		}
		e.wmu.Unlock()
	}
	e.queued.Add(1)
	e.ch <- q
}

func (e *emitter) emit(q queued) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return
	}
	e.queued.Add(1)
	e.ch <- q
}

// Broken is closed when a stdout write failed (EPIPE: the reader went
// away); the caller runs terminate(). Later frames are discarded.
func (e *emitter) Broken() <-chan struct{} { return e.broken }

// failFast stops write retries (pcwrap is shutting down).
func (e *emitter) failFast() { e.fastOnce.Do(func() { close(e.fast) }) }

// Close flushes the queued frames and stops the goroutine.
func (e *emitter) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
	e.mu.Unlock()
	<-e.done
}

func (e *emitter) loop() {
	defer close(e.done)
	if e.files != nil {
		defer func() {
			e.wmu.Lock()
			e.files.Close()
			e.wmu.Unlock()
		}()
	}
	for q := range e.ch {
		e.wmu.Lock()
		e.writeLocked(q)
		e.wmu.Unlock()
		e.queued.Add(-1)
	}
}

// writeLocked writes q unless stdout broke, then recycles its buffer.
// e.wmu held.
func (e *emitter) writeLocked(q queued) {
	if !e.dead {
		e.dead = e.write(q.f)
	}
	if q.owned {
		select {
		case e.free <- q.f.Data[:0]:
		default:
		}
	}
}

// write writes one frame; it reports whether stdout broke.
func (e *emitter) write(f frame.Frame) (dead bool) {
	if e.events {
		e.writeEvent(f)
		return false
	}
	e.seq++
	f.Seq = e.seq
	e.buf = append(f.AppendJSON(e.buf[:0]), '\n')
	if _, err := e.stdout.Write(e.buf); err != nil {
		e.log.Warn("stdout write failed; terminating", "err", err)
		e.brokenOnce.Do(func() { close(e.broken) })
		return true
	}
	return false
}

// writeEvent publishes f under the next seq, retrying a failed write
// until it succeeds or pcwrap shuts down; only then is a frame lost, and
// a lost frame does not use up its seq.
func (e *emitter) writeEvent(f frame.Frame) {
	f.Seq = 0 // event bodies never carry seq (§7.2)
	e.buf = append(f.AppendJSON(e.buf[:0]), '\n')
	seq := e.seq + 1
	for attempt := 1; ; attempt++ {
		err := e.files.Write(seq, e.buf)
		if err == nil {
			if attempt > 1 {
				e.log.Warn("event writes recovered", "file", sessiondir.SeqName(seq), "attempts", attempt)
			}
			e.seq = seq
			return
		}
		if e.isFast() {
			if dirRemoved(e.eventsfd) {
				// The host removes the session after shutdownAck
				// (pcwrap stop, §9.4): a later frame has nowhere to go,
				// and nobody to read it.
				e.log.Debug("event frame dropped: the session dir was removed", "type", f.Type, "file", sessiondir.SeqName(seq))
				return
			}
			e.log.Error("event frame lost while shutting down", "type", f.Type, "file", sessiondir.SeqName(seq), "err", err)
			return
		}
		if attempt == 1 {
			e.log.Error("event write failed; output paused, retrying", "file", sessiondir.SeqName(seq), "err", err)
		}
		t := time.NewTimer(eventRetryInterval)
		select {
		case <-t.C:
		case <-e.fast:
			t.Stop()
		}
	}
}

func (e *emitter) isFast() bool {
	select {
	case <-e.fast:
		return true
	default:
		return false
	}
}
