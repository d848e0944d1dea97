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
func workspacePayloadBound(maxFrame int, id prp.Identity) int {
	ids := len(id.RunnerInstanceID) + len(id.EnvironmentLeaseID) + len(id.RunID) + len(id.NormalizedSessionID) +
		len(id.TurnID) + len(id.ItemID)
	sealedMax := (maxFrame-sealOverheadBytes)/2 - sealTagBytes
	return max(1, min(workspace.MaxPayloadBytes, sealedMax-envelopeAllowanceBytes-2*ids))
}

// The sealed frame's size for len encoded bytes is 2×(len+16)+128
// (state.SealedFrameBytes); envelopeAllowanceBytes is the rest of the
// envelope around a payload (field names, type, sequence, timestamps).
const (
	sealOverheadBytes      = 128
	sealTagBytes           = 16
	envelopeAllowanceBytes = 1024
)
