package runner

import (
	"sync/atomic"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/workspace"
)

// frameLimit is the frame limit every outgoing event must fit once sealed
// (workspace.md §3.4): --max-frame-bytes, or the current connection's
// welcome maxFrameBytes when smaller. The outbox refuses an event past it
// at enqueue; the agent bounds workspace events to it.
type frameLimit struct {
	flag    int
	welcome atomic.Int64 // the current welcome's maxFrameBytes; 0: none
}

func newFrameLimit(flag int) *frameLimit { return &frameLimit{flag: flag} }

// get is the limit now.
func (f *frameLimit) get() int {
	if w := int(f.welcome.Load()); w > 0 {
		return min(f.flag, w)
	}
	return f.flag
}

// connected applies a welcome's maxFrameBytes (0: none given).
func (f *frameLimit) connected(w *prp.Welcome) { f.welcome.Store(int64(max(w.MaxFrameBytes, 0))) }

// workspacePayloadBound is the largest workspace change set payload whose
// sealed envelope, with identity id around it, fits a frame of maxFrame
// bytes (workspace.md §3.4), at most workspace.MaxPayloadBytes. The
// envelope names the identity twice (envelope and event payload).
//
// It also keeps workspaceEventsPerRoom such envelopes within the outbox's
// room for events other than P0 (outboxRoom): a turn's verified
// change.updated and diff.recorded come one after the other, and with
// runnerd's default outbox (64 KiB, 32 KiB of it reserved for P0) two
// envelopes sized to the frame would not fit, so the second would be
// refused as backpressure and the verified diff lost. Shedding diff text
// file by file keeps it, with its stats. The server's 16 MiB outbox is
// never the tighter bound.
func workspacePayloadBound(maxFrame, outboxRoom int, id prp.Identity) int {
	ids := len(id.RunnerInstanceID) + len(id.EnvironmentLeaseID) + len(id.RunID) + len(id.NormalizedSessionID) +
		len(id.TurnID) + len(id.ItemID)
	sealedMax := (maxFrame-sealOverheadBytes)/2 - sealTagBytes
	envelopeMax := min(sealedMax, outboxRoom/workspaceEventsPerRoom)
	return max(1, min(workspace.MaxPayloadBytes, envelopeMax-envelopeAllowanceBytes-2*ids))
}

// workspaceEventsPerRoom is how many workspace envelopes the outbox's
// non-P0 room must hold at once: the turn's last harness set, the verified
// change.updated and diff.recorded, and one more for the turn's own events.
const workspaceEventsPerRoom = 4

// The sealed frame's size for len encoded bytes is 2×(len+16)+128
// (state.SealedFrameBytes); envelopeAllowanceBytes is the rest of the
// envelope around a payload (field names, type, sequence, timestamps).
const (
	sealOverheadBytes      = 128
	sealTagBytes           = 16
	envelopeAllowanceBytes = 1024
)
