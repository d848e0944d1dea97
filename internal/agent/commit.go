package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// maxUncommittedBatches bounds the batches prepared but not yet durable.
// At the bound the event reader stops taking event files (a file stays on
// disk, never dropped) until the committer catches up. Commands and
// provider callbacks always get in, since whoever holds Manager.mu never
// waits for the committer; they come one at a time, so the queue exceeds
// the bound by a few at most. One, so that prp.md §8.5's flow control
// (provider output is taken once everything sent is acknowledged) counts
// the reader's last batch as sent: with room for more, the reader ran
// ahead of its own ACK wait and split a backlog into more, smaller writes
// (BenchmarkAgentMessageOnWire: about 7% more runnerd CPU per message at
// four).
const maxUncommittedBatches = 1

// batch is one durable step of the agent, prepared under Manager.mu and
// made durable by the committer: its stdin lines and prompt are staged
// under temporary names, then the record (which names them) and the events
// go in one write with the command outcome they are evidence of, then the
// effects the write covers, in this order: the event files it consumed are
// deleted, its lines and then its prompt are published, its waiters are
// woken and its after-commit hooks start.
type batch struct {
	record  json.RawMessage // the Stored record as prepared
	texts   []ItemText      // the item texts, apart from the record
	events  []provider.Event
	outcome *CommandOutcome
	// The process whose files and lines the batch covers (nil when none),
	// with its writer and events directory as they were at preparation.
	proc   *process
	w      *sessiondir.Writer
	fs     *sessiondir.DirFS
	remove []string // event files the write covers
	lines  [][]byte // stdin lines the write enables
	// staged names lines[i]'s file: staged before the write, which
	// records the names (Stored.Lines), and published after it.
	staged []sessiondir.Staged
	// prompt is a turn.start prompt: staged (written under its temporary
	// name) before the write, which records where (prp.md §7.2 item 8),
	// and published after the lines.
	prompt *promptLine
	// discard is a staged prompt that will never be published (its
	// publication failed): removed once the loss is durable.
	discard *sessiondir.Staged
	wakes   []func()
	after   []func(context.Context)

	done chan struct{} // closed once the batch is settled
	err  error         // the failed commit, read after done
	// writeErr is a failed stdin write of this batch (write_error was
	// latched) and next the batch that commits the loss; both are read
	// after done.
	writeErr error
	next     *batch
}

// promptLine is a turn.start prompt reserved as stdin file seq.
type promptLine struct {
	commandID string
	line      []byte
	seq       int64
	answer    bool // request.resolve's answer (PromptDelivery.Answer)
}

// committer makes the agent's batches durable one at a time, one durable
// write per batch, in the order they were prepared; a batch's effects
// follow its write and precede the next batch's. One goroutine at a time
// settles the queue (drain): its routine, or the event reader settling the
// batch it prepared itself once it has released Manager.mu. Contract:
//   - a stdin line is published, and an event file deleted, only after
//     the write that covers it is durable; a restart publishes the lines a
//     durable write named and runnerd left staged (Stored.Lines);
//   - a command outcome is in the same write as its evidence;
//   - at most maxUncommittedBatches batches wait while the event reader
//     prepares (awaitRoom); nothing that holds Manager.mu waits for it;
//   - a failed write is fatal: that batch and every later one fail with its
//     error and have no effect;
//   - a failed stdin write latches write_error and commits the loss; the
//     process's later lines are not written.
//
// Whoever drains takes Manager.mu only between writes (a write failure's
// loss), never across the store's write.
type committer struct {
	m *Manager

	// mu guards the fields below; never held across a write.
	mu     sync.Mutex
	queue  []*batch
	last   *batch // the newest batch queued; nil before the first
	failed error  // the first failed commit
	// deadWriters are processes whose stdin write failed: none of their
	// later lines is written.
	deadWriters map[*process]bool
	closed      bool // the routine has ended: a batch fails at once
	// draining is held by the one goroutine settling the queue (the
	// routine, or a preparer settling its own batch); it goes only once
	// the queue is empty, so a batch queued meanwhile is settled by it.
	draining bool
	kick     chan struct{} // one-slot: a batch was queued
	room     chan struct{} // closed and replaced each time a batch settles
}

func newCommitter(m *Manager) *committer {
	return &committer{m: m, deadWriters: map[*process]bool{}, kick: make(chan struct{}, 1), room: make(chan struct{})}
}

// push queues b and wakes the routine, unless the caller settles it
// itself (inline: it calls drain once it holds no lock). It never blocks.
func (c *committer) push(b *batch, inline bool) {
	c.mu.Lock()
	if c.closed {
		// The Manager is closed (a crash stand-in, or runnerd's stop):
		// nothing is made durable any more.
		c.last = b
		c.mu.Unlock()
		b.err = errCommitterClosed
		close(b.done)
		return
	}
	c.queue = append(c.queue, b)
	c.last = b
	c.mu.Unlock()
	if inline {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// newest is the batch queued last. Right after a preparation under
// Manager.mu it is that preparation's: every push happens under it.
func (c *committer) newest() *batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// err is the latched failure of an earlier commit, or nil.
func (c *committer) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// sync waits until every batch queued so far is settled and returns the
// latched commit failure, if any.
func (c *committer) sync() error {
	c.mu.Lock()
	b := c.last
	c.mu.Unlock()
	if b == nil {
		return nil
	}
	if err := b.waitChain(); err != nil {
		return err
	}
	return c.err()
}

// waitChain waits until b is settled, and with it the loss a write
// failure of b queued (b.next), and returns the first commit error.
func (b *batch) waitChain() error {
	for ; b != nil; b = b.next {
		<-b.done
		if b.err != nil {
			return b.err
		}
	}
	return nil
}

// awaitRoom waits, without any lock, until fewer than
// maxUncommittedBatches batches wait, or ctx ends.
func (c *committer) awaitRoom(ctx context.Context) error {
	for {
		c.mu.Lock()
		n, room := len(c.queue), c.room
		c.mu.Unlock()
		if n < maxUncommittedBatches {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-room:
		}
	}
}

// run is the committer's routine. It settles the queue whenever a batch
// is queued for it (kick), and returns once stop is closed and the queue
// is empty.
func (c *committer) run(stop <-chan struct{}) {
	for {
		select {
		case <-c.kick:
			c.drain()
		case <-stop:
			c.mu.Lock()
			// A preparer still draining keeps the committer open until
			// it has settled the queue.
			c.closed = len(c.queue) == 0 && !c.draining
			closed, wait, room := c.closed, c.draining, c.room
			c.mu.Unlock()
			if closed {
				return
			}
			if wait {
				<-room // the drainer settles a batch; then look again
			} else {
				c.drain()
			}
		}
	}
}

// drain settles the queued batches in order, unless another goroutine is
// already doing so: that one settles whatever is queued before it stops.
// The caller holds no lock. Settling on the goroutine that prepared the
// batch spares the agent's hot path two hand-offs (preparer to committer,
// and back to the next event file).
func (c *committer) drain() {
	c.mu.Lock()
	if c.draining {
		c.mu.Unlock()
		return
	}
	c.draining = true
	for len(c.queue) > 0 {
		b := c.queue[0]
		c.mu.Unlock()
		c.settle(b)
		c.mu.Lock()
		c.queue = c.queue[1:]
		close(c.room)
		c.room = make(chan struct{})
		close(b.done)
	}
	c.draining = false
	c.mu.Unlock()
}

// settle commits b and carries out its effects.
func (c *committer) settle(b *batch) {
	m := c.m
	if err := c.err(); err != nil {
		b.err = err
		return
	}
	p := b.proc
	c.mu.Lock()
	dead := p != nil && c.deadWriters[p]
	c.mu.Unlock()
	var staged sessiondir.Staged
	var stageErr error
	var unpublished *sessiondir.Staged // the staged prompt until it is published
	nlines := 0                        // b.staged[:nlines] are staged
	if !dead {
		for ; nlines < len(b.lines) && stageErr == nil; nlines++ {
			stageErr = b.w.StageStdinAs(b.lines[nlines], b.staged[nlines])
		}
		if stageErr != nil {
			nlines--
		}
	}
	if b.prompt != nil && !dead && stageErr == nil {
		staged, stageErr = b.w.StageStdin(b.prompt.line, b.prompt.seq)
		if stageErr == nil {
			unpublished = &staged
			stageErr = b.recordPrompt(staged)
		}
	}
	if err := m.cfg.Sink.Commit(b.record, b.texts, b.events, b.outcome); err != nil {
		if unpublished != nil {
			_ = b.w.Discard(staged)
		}
		b.discardLines(0, nlines)
		err = fmt.Errorf("commit agent state: %w", err)
		m.log.Error("agent state not durable; no later change is made", "err", err)
		c.mu.Lock()
		c.failed = err
		c.mu.Unlock()
		b.err = err
		return
	}
	if b.discard != nil {
		_ = b.w.Discard(*b.discard)
	}
	for _, n := range b.remove { // b.remove is empty without b.fs
		if err := b.fs.Remove(n); err != nil {
			m.log.Warn("remove consumed event file", "file", n, "err", err)
		}
	}
	switch {
	case dead:
	case stageErr != nil:
		b.discardLines(0, nlines)
		c.writeFailed(b, stageErr, unpublished)
	default:
		c.writeLines(b, unpublished)
	}
	for _, w := range b.wakes {
		w()
	}
	for _, fn := range b.after {
		m.hooks.Add(1)
		go func() {
			defer m.hooks.Done()
			fn(m.ctx)
		}()
	}
}

// writeLines publishes b's staged stdin lines, then its staged prompt.
func (c *committer) writeLines(b *batch, unpublished *sessiondir.Staged) {
	if unpublished != nil {
		hookBeforePublish()
	}
	// A line the record covers is published even while runnerd stops.
	for i, sl := range b.staged {
		if _, err := b.w.Publish(sl); err != nil {
			b.discardLines(i, len(b.staged))
			c.writeFailed(b, err, unpublished)
			return
		}
	}
	if unpublished != nil {
		if _, err := b.w.Publish(*unpublished); err != nil {
			c.writeFailed(b, err, unpublished)
		}
	}
}

// discardLines removes b's staged lines [from, to), which will never be
// published: the agent is lost or the write never became durable.
func (b *batch) discardLines(from, to int) {
	for _, sl := range b.staged[from:to] {
		_ = b.w.Discard(sl)
	}
}

// writeFailed latches write_error on b's process after a failed stdin
// write: none of its later lines is written, and the loss is committed
// next (b.next, which sync waits for too), with the discard of an
// unpublished staged prompt after it (until then a restart must still find
// it unpublished).
func (c *committer) writeFailed(b *batch, err error, staged *sessiondir.Staged) {
	m, p := c.m, b.proc
	b.writeErr = err
	m.log.Warn("stdin write failed", "err", fmt.Errorf("%w: %w", provider.ErrWrite, err))
	c.mu.Lock()
	c.deadWriters[p] = true
	c.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	p.nextSeq = p.w.Next() // the lines never written are not reserved
	if m.prepareLocked(m.lostLocked(p, provider.LossWriteError), nil, nil, nil, staged, false) == nil {
		b.next = c.newest()
	}
}

// forget drops what the committer keeps about p once p is gone.
func (c *committer) forget(p *process) {
	c.mu.Lock()
	delete(c.deadWriters, p)
	c.mu.Unlock()
}

// errCommitterClosed is what a change prepared after Close gets.
var errCommitterClosed = errors.New("the agent executor is closed")

// recordPrompt adds where the prompt was staged to b's record, so a
// restart can tell whether it was published (prp.md §7.2 item 8).
func (b *batch) recordPrompt(staged sessiondir.Staged) error {
	var st Stored
	if err := json.Unmarshal(b.record, &st); err != nil {
		return fmt.Errorf("record the staged prompt: %w", err)
	}
	st.Prompt = &PromptDelivery{CommandID: b.prompt.commandID, Seq: staged.Seq, Tmp: staged.Tmp, Answer: b.prompt.answer}
	record, err := jsonenc.Marshal(st)
	if err != nil {
		return fmt.Errorf("record the staged prompt: %w", err)
	}
	b.record = record
	return nil
}
