package runner

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/runner/config"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
)

// TestTicketNeverOnDiskOrInLogs: the bootstrap ticket reaches neither the
// state dir nor the debug log, and Run destroys it once the welcome
// delivered the lease (ARCHITECTURE.md invariant 3, prp.md §2.4).
func TestTicketNeverOnDiskOrInLogs(t *testing.T) {
	simTest(t, nil, func(t *testing.T, h *harness) {
		tok, err := h.core.MintTicket()
		require.NoError(t, err)
		ticket, err := config.NewBootstrapTicket(tok)
		require.NoError(t, err)
		var logs syncbuf.Buffer
		logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- runLoop(ctx, h.config(false), ticket, logger, options{Transport: h.transport}) }()
		cmd := h.queue("runner.drain", `{}`)
		h.waitResult(cmd.CommandID)
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(waitBound):
			t.Fatal("runner did not stop")
		}
		require.False(t, ticket.Present(), "destroyed after the welcome")
		require.NotContains(t, logs.String(), tok)
		require.NoError(t, filepath.WalkDir(h.stateDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NotContains(t, string(b), tok, path)
			require.NotContains(t, string(b), "lease_", "no lease token on disk: %s", path)
			return nil
		}))
	})
}

// FuzzHandleCommand feeds arbitrary command bytes to admission: a bad
// command is a clear error, never a panic, and the committed state stays
// loadable with nothing lost.
func FuzzHandleCommand(f *testing.F) {
	for _, seed := range []string{
		`{"schema":"paperclip.prp.command.v1","commandId":"c1","controllerSeq":1,"type":"session.snapshot","issuedAt":"t","payload":{}}`,
		`{"schema":"paperclip.prp.command.v1","commandId":"c1","controllerSeq":1,"type":"runner.drain","issuedAt":"t","payload":{}}`,
		`{"schema":"paperclip.prp.command.v1","commandId":"c1","controllerSeq":1,"type":"run.prepare","issuedAt":"t","payload":{"provider":{"kind":"codex"}}}`,
		`{"schema":"paperclip.prp.command.v1","commandId":"c1","controllerSeq":2,"type":"turn.start","issuedAt":"t","payload":{}}`,
		`{"schema":"paperclip.prp.command.v9","commandId":"c1","controllerSeq":1,"type":"turn.start","issuedAt":"t","payload":{}}`,
		`{"commandId":1}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	n := 0
	f.Fuzz(func(t *testing.T, raw []byte) {
		n++
		st, err := state.Open(state.Config{Dir: filepath.Join(dir, "s"+itoa(n)), Identity: testIdentity})
		require.NoError(t, err)
		defer st.Close()
		r := newLoop(config.Config{Identity: testIdentity}, st, slog.New(slog.DiscardHandler), options{})
		before := st.Snapshot()
		if err := r.handleCommand(t.Context(), raw); err != nil {
			require.Equal(t, before.LastControllerCommandSeq, st.Snapshot().LastControllerCommandSeq, "a refused command is not journaled")
			return
		}
		var c prp.Command
		require.NoError(t, json.Unmarshal(raw, &c))
		res, ok := st.Snapshot().ProcessedCommands[c.CommandID]
		require.True(t, ok, "an admitted command is journaled")
		require.NotEqual(t, state.StatusPending, res.Status, "and settled")
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
