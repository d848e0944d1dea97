package runner

import "github.com/pcrunner/pcrunner/internal/state"

// Durable-write kill points: in testhooks builds (killpoint_testhook_linux.go)
// runnerd SIGKILLs itself right after a chosen durable write, so a crash
// test lands exactly between two durable steps of a command instead of at
// a guessed moment. In production both hooks are no-ops.
var (
	// hookCommandReceived sees each command the loop is about to admit,
	// before any write of it.
	hookCommandReceived = func(commandType string) {}
	// hookDurableWrite sees each durable write the runner made, with the
	// types of the events it enqueued (those the caller knows).
	hookDurableWrite = func(eventTypes []string) {}
)

// update is the runner's one way to make a durable write: the store's
// Update, then the kill-point hook.
func (r *loop) update(fn func(tx *state.Tx) error) error {
	if err := r.store.Update(fn); err != nil {
		return err
	}
	hookDurableWrite(nil)
	return nil
}
