package state

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/prp"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	if os.Getenv(ackCrashChildEnv) != "" {
		ackCrashChild()
		return
	}
	if os.Getenv(killChildEnv) != "" {
		killChild()
		return
	}
	goleak.VerifyTestMain(m)
}

var testIdentity = prp.Identity{
	RunnerInstanceID: "runner_1", EnvironmentLeaseID: "env_lease_1", RunID: "run_1",
	NormalizedSessionID: "session_1", TurnID: "turn_1", ItemID: "item_1",
}

// fakeClock is a deterministic clock: each reading advances one millisecond.
type fakeClock struct{ n atomic.Int64 }

func (c *fakeClock) Now() time.Time {
	return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).Add(time.Duration(c.n.Add(1)) * time.Millisecond)
}

func testConfig(dir string) Config {
	c := &fakeClock{}
	return Config{Dir: dir, Identity: testIdentity, Now: c.Now}
}

func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newStore(t *testing.T) (*Store, Config) {
	t.Helper()
	cfg := testConfig(filepath.Join(t.TempDir(), "state"))
	return openStore(t, cfg), cfg
}

// readFile returns the durable state in the form FileName had before the
// store (the whole outbox and the records inside), read through Read.
func readFile(t *testing.T, cfg Config) []byte {
	t.Helper()
	st, err := Read(cfg.Dir)
	require.NoError(t, err)
	b, err := st.MarshalJSON()
	require.NoError(t, err)
	return b
}

// readProjection returns FileName's JSON without the whitespace that pads
// it to a whole block (padBlock).
func readProjection(t *testing.T, cfg Config) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.Dir, FileName))
	require.NoError(t, err)
	if padBlock > 0 {
		require.Zero(t, len(b)%padBlock, "the state file is padded to whole blocks")
	}
	return bytes.TrimRight(b, " \n")
}

// writeLegacy makes cfg.Dir an old-format directory holding b as
// FileName and no store.
func writeLegacy(t *testing.T, cfg Config, b []byte) {
	t.Helper()
	require.NoError(t, os.Remove(filepath.Join(cfg.Dir, DBName)))
	require.NoError(t, os.WriteFile(filepath.Join(cfg.Dir, FileName), b, 0o600))
}

func obj(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func enqueue(t *testing.T, s *Store, ev Event) uint64 {
	t.Helper()
	var seq uint64
	require.NoError(t, s.Update(func(tx *Tx) error {
		var err error
		seq, err = tx.Enqueue(ev)
		return err
	}))
	return seq
}

func p1(typ string) Event {
	return Event{Type: typ, Priority: P1, Payload: json.RawMessage(`{"channel":"progress"}`)}
}

func command(seq uint64, id, typ string, payload string) *prp.Command {
	raw := `{"schema":"paperclip.prp.command.v1","commandId":"` + id + `","controllerSeq":` +
		strconv.FormatUint(seq, 10) + `,"type":"` + typ + `","issuedAt":"2026-11-30T12:00:00.000Z","payload":` + payload + `}`
	c, err := prp.DecodeCommand([]byte(raw))
	if err != nil {
		panic(err)
	}
	return c
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
