package prp

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// TestSessionFrameBounds: a session seals and opens counters
// 0..limit-1 and refuses the next frame in each direction with
// ErrRekeyRequired, untouched (durability.md §2.1, §2.2 item 1).
func TestSessionFrameBounds(t *testing.T) {
	key := AuthKey("t")
	runner, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	core, err := newSession(roleCore, key[:], []byte("{}"), "a", "b")
	require.NoError(t, err)
	require.Equal(t, uint64(MaxSecureChannelFrames), runner.seal.limit, "the default is the reference's bound")
	require.Equal(t, uint64(1<<20), uint64(MaxSecureChannelFrames))

	runner.SetFrameLimits(8, 0)
	core.SetFrameLimits(0, 4)
	for i := range 8 {
		f, err := runner.Seal([]byte("x"))
		require.NoError(t, err, "frame %d", i)
		if i < 4 {
			_, err = core.Open(f)
			require.NoError(t, err, "frame %d", i)
		} else if i == 4 {
			_, err = core.Open(f)
			require.ErrorIs(t, err, ErrRekeyRequired, "the receive bound")
		}
	}
	dst := []byte("keep")
	out, err := runner.AppendSeal(dst, []byte("x"))
	require.ErrorIs(t, err, ErrRekeyRequired, "counter 8 is never sealed")
	require.Equal(t, "keep", string(out))
	require.Equal(t, uint64(8), runner.seal.counter)
	require.NotErrorIs(t, err, ErrSecureFrame, "a rekey is no forged frame")

	// A bound above the reference's is the reference's.
	runner.SetFrameLimits(MaxSecureChannelFrames+1, 0)
	require.Equal(t, uint64(MaxSecureChannelFrames), runner.seal.limit)
	runner.seal.counter = MaxSecureChannelFrames
	_, err = runner.Seal([]byte("x"))
	require.ErrorIs(t, err, ErrRekeyRequired)
}

// TestRekeyCloseStyles: at its frame bound a link either sends Close 1012
// (the runner; a listen-mode core) or drops the TCP connection with no
// Close frame (a dial-mode core), and ends with ErrRekeyRequired either way
// (durability.md §2.1).
func TestRekeyCloseStyles(t *testing.T) {
	for _, tc := range []struct {
		style RekeyClose
		code  websocket.StatusCode
	}{{RekeyCloseFrame, websocket.StatusServiceRestart}, {RekeyDrop, -1}} {
		synctest.Test(t, func(t *testing.T) {
			act := newActivity()
			ws, srv := wsPipe(t, act, nil)
			key := AuthKey("t")
			sess, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
			require.NoError(t, err)
			sess.SetFrameLimits(3, 0)
			l := startLink(ws, act, sess, linkConfig{Inspect: inspectKinds, RekeyClose: tc.style})
			for range 4 {
				_ = l.send(context.Background(), []byte(`{"kind":"event"}`))
			}
			var readErr error
			frames := 0
			for {
				if _, _, readErr = srv.Read(context.Background()); readErr != nil {
					break
				}
				frames++
			}
			require.Equal(t, 3, frames, "counters 0..2 only")
			require.Equal(t, tc.code, websocket.CloseStatus(readErr), "%v", readErr)
			<-l.Done()
			require.ErrorIs(t, l.Err(), ErrRekeyRequired)
			l.close(nil)
			_ = srv.CloseNow()
		})
	}
}

// TestAttachDurabilityIgnored: an indexed core adds
// durability: "durability.indexed_state.v1" to run.attach (durability.md
// §1.3); the next authority reads the same with or without it.
func TestAttachDurabilityIgnored(t *testing.T) {
	conn := map[string]any{"mode": "connect", "connectUrl": "ws://127.0.0.1:9/x"}
	plain := attachPayload(nextIdentity, conn)
	var m map[string]any
	require.NoError(t, json.Unmarshal(plain, &m))
	m["durability"] = DurabilityCapability
	n1, c1, err := ParseNextAuthority(plain)
	require.NoError(t, err)
	n2, c2, err := ParseNextAuthority(jsonenc.MustMarshal(m))
	require.NoError(t, err)
	require.Equal(t, n1, n2)
	require.Equal(t, c1, c2)
}

// TestRekeyCloseBounded: a peer that never answers the Close 1012 holds the
// link's end no longer than rekeyCloseWait.
func TestRekeyCloseBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		act := newActivity()
		ws, srv := wsPipe(t, act, nil) // srv never reads: the Close frame cannot even be written
		key := AuthKey("t")
		sess, err := newSession(roleRunner, key[:], []byte("{}"), "a", "b")
		require.NoError(t, err)
		sess.SetFrameLimits(3, 0)
		sess.seal.counter = 3
		l := startLink(ws, act, sess, linkConfig{Inspect: inspectKinds, RekeyClose: RekeyCloseFrame})
		start := time.Now()
		require.NoError(t, l.send(context.Background(), []byte(`{"kind":"event"}`)))
		<-l.Done()
		require.ErrorIs(t, l.Err(), ErrRekeyRequired)
		l.close(nil)
		require.LessOrEqual(t, time.Since(start), rekeyCloseWait)
		_ = srv.CloseNow()
	})
}
