package state_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// The control loop's use of the store: admit a command (pending marker
// durable before the effect), run the effect, record the result and its
// events in one write; then send, and trim on the core's ACK.
func Example() {
	dir, _ := os.MkdirTemp("", "state-example")
	defer os.RemoveAll(dir)
	s, err := state.Open(state.Config{Dir: filepath.Join(dir, "state"), Identity: prp.Identity{
		RunnerInstanceID: "runner_1", EnvironmentLeaseID: "lease_env_1", RunID: "run_1",
		NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	cmd, err := prp.DecodeCommand([]byte(`{"schema":"paperclip.prp.command.v1","commandId":"command_prp_00000001",
		"controllerSeq":1,"type":"session.open","issuedAt":"2026-11-30T12:00:00.000Z","payload":{"reuse":"same_session"}}`))
	if err != nil {
		fmt.Println(err) // fatal for the runner
		return
	}
	var adm state.Admission
	_ = s.Update(func(tx *state.Tx) error { adm, err = tx.BeginCommand(cmd); return err })
	fmt.Println("execute:", adm.Disposition == state.Execute)

	// ... the effect runs here, after the pending marker is durable ...

	var res state.CommandResult
	_ = s.Update(func(tx *state.Tx) error {
		if _, err := tx.Enqueue(state.Event{Type: "session.started", Priority: state.P0, Payload: json.RawMessage(`{"threadId":"t1"}`)}); err != nil {
			return err
		}
		res, err = tx.FinishCommand(cmd.CommandID, state.StatusCompleted, json.RawMessage(`{"threadId":"t1"}`))
		return err
	})
	fmt.Println("result:", res.Wire().Status)

	for _, ev := range s.Unsent(0) {
		wire, _ := ev.Wire(2) // send these bytes
		_ = wire
		fmt.Println("send:", ev.SourceSeq, ev.EventType)
	}
	persisted, _ := s.ApplyAck(1, 2)
	fmt.Println("acked:", s.Summary().AckedSourceSeq, "persisted:", persisted)
	// Output:
	// execute: true
	// result: completed
	// send: 1 session.started
	// acked: 1 persisted: false
}
