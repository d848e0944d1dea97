package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
)

// Storage pressure (durability.md §6.2): while a state write waits for disk
// space, the command routine is blocked inside the store. The client's
// reader still answers pings (the pong reads the store's lock-free summary,
// which reports storagePressure) and its supervisor still renews the lease.
// Other frames wait in arrival order (deferral, awaitSpace): an ACK waits
// for the write, not on the store's lock, and the reader stops reading
// once prp.MaxDeferredFrames or prp.MaxDeferredBytes wait, so none is
// dropped and, once the write completes, they apply in order. What must end the wait from outside is a stop: a revoke, the lease's
// expiry or the lifetime's end (Run is ending: onEnding), or a fresh stop
// command that is queued behind the blocked one (onCommandArrived). A
// connection lost during the wait is not redialled, nor a listen-mode
// peer authenticated, until the write completes
// (ClientConfig.HoldReconnect), so the lease is not renewed and its expiry
// ends the wait.

// errStopUnderPressure ends a runner told to stop while a state write waits
// for disk space: its agents are stopped, and the stop's result, which
// could not be persisted, is neither invented nor sent.
var errStopUnderPressure = config.NewError(config.CodeRunnerFailed,
	"stop command received while the disk is full; its result could not be persisted", nil)

// stopCommandTypes are the commands that unwind a storage-pressure wait
// (durability.md §6.2 item 3).
var stopCommandTypes = map[string]bool{
	"turn.stop": true, "turn.interrupt": true, "run.cancel": true, "session.close": true,
	"session.destroy": true, "runner.shutdown": true, "runner.suspend": true,
}

// onEnding releases a state write waiting for disk space when the client's
// Run ends for any reason: the command routine it blocks must return for
// Run to return. A write that is not waiting is unaffected.
func (r *loop) onEnding(err error) {
	if err == nil {
		err = errors.New("client stopped")
	}
	r.store.Abort(fmt.Errorf("runner stopping: %w", err))
}

// onCommandArrived runs on the client's reader for every command as it
// arrives. While a state write waits for disk space, a fresh stop command
// (a controllerSeq above the last admitted one) cannot wait its turn
// behind the blocked command: it ends the loop, which aborts the wait.
func (r *loop) onCommandArrived(env *prp.Envelope) {
	if !r.store.Summary().DiskFull {
		return
	}
	var c struct {
		Type          string `json:"type"`
		ControllerSeq uint64 `json:"controllerSeq"`
	}
	if json.Unmarshal(env.Payload, &c) != nil || !stopCommandTypes[c.Type] {
		return
	}
	if c.ControllerSeq <= r.store.Cursors().LastControllerCommandSeq {
		return // a replay of an admitted command, not a fresh stop
	}
	r.log.Warn("stop command while a state write waits for disk space; stopping without its result", "type", c.Type)
	r.finish(errStopUnderPressure)
}

// deferral tells the client's reader whether inbound frames wait behind a
// state write blocked by a full disk (durability.md §6.2 item 2), and the
// cursor and produced sequence a deferred ACK must lie within. It reads
// only the store's lock-free summary.
func (r *loop) deferral() prp.Deferral {
	s := r.store.Summary()
	return prp.Deferral{
		Deferring:      s.DiskFull,
		AckedSourceSeq: int64(s.AckedSourceSeq), ProducedSourceSeq: int64(s.HighestSourceSeq),
	}
}

// readHeld logs the reader stopping at the deferral bound, then tells
// observe (tests) when set.
func (r *loop) readHeld(observe func(int, int64)) func(int, int64) {
	return func(frames int, bytes int64) {
		r.log.Warn("inbound frames deferred behind a full disk reached their bound; not reading the socket until they apply",
			"frames", frames, "bytes", bytes)
		if observe != nil {
			observe(frames, bytes)
		}
	}
}

// awaitSpace holds a deferred ACK while a state write waits for disk space
// (durability.md §6.2 item 2): the ack routine waits for the wait's end
// rather than queuing on the store's lock, and the frames behind the ACK
// wait in order (the client's reader bounds them). False means ctx ended
// first; Run's end aborts the blocked write too (onEnding).
func (r *loop) awaitSpace(ctx context.Context) bool {
	for {
		ch := r.store.SpaceWait()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
