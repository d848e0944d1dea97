package prp

import "errors"

// Capability values of the durability extensions (durability.md §1.1; R-transport,
// CP #authorizeHello). runnerd claims the first two in every auth_hello; it
// requests neither epoch capability (level D1, durability.md §0).
const (
	// DurabilityCapability is auth_hello's and an indexed challenge's durability.
	DurabilityCapability = "durability.indexed_state.v1"
	// OutputBodiesCapability is auth_hello's and an indexed challenge's outputBodies.
	OutputBodiesCapability = "history.output_bodies.v1"
	// CommandEpochsCapability is the command-epoch capability (durability.md §3).
	CommandEpochsCapability = "transport.command_epochs.v1"
	// EventEpochsCapability is the event-epoch capability (durability.md §4).
	EventEpochsCapability = "transport.event_epochs.v1"
)

// Core → runner control kinds of the epoch extensions (durability.md §3.2,
// §4.2). runnerd knows them so that it can refuse them: it never negotiates
// epochs, and either kind on such a connection is a fatal protocol error
// (durability.md §1.4).
const (
	KindCommandEpochRotate  = "command_epoch_rotate"
	KindEventEpochCommitted = "event_epoch_committed"
)

// ErrUnnegotiatedEpoch reports an epoch control kind on a connection that did
// not negotiate its capability: fatal, state intact (durability.md §1.4,
// overriding prp.md §3.2's drop and reconnect for these kinds only).
var ErrUnnegotiatedEpoch = errors.New("protocol error: epoch control frame without the negotiated capability")

// challengeEpochFields are the challenge members a core adds only when the
// hello requested an epoch capability (durability.md §1.2). runnerd requests
// none, so any of them fails the attempt before auth_response.
// commandResume is not among them: an indexed core sends it to a runner
// that asked for nothing (§11 scenario 2), and checkCommandResume reads it.
var challengeEpochFields = []string{"commandEpochs", "eventEpochs", "eventResume", "eventEpochLimit"}

// CommandResume is an indexed challenge's commandResume (durability.md
// §1.2): the hello's command epoch (null: runnerd never holds one) and the
// core's controller sequence.
type CommandResume struct {
	ControllerEpoch          *string `json:"controllerEpoch"`
	LastControllerCommandSeq int64   `json:"lastControllerCommandSeq"`
}
