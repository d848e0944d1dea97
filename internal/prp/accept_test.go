package prp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// strayKind is how a stray listener peer behaves after it took auth_hello.
type strayKind string

const (
	straySilent  strayKind = "silent"  // never answers
	straySlow    strayKind = "slow"    // answers a bogus challenge just inside the auth bound
	strayGarbage strayKind = "garbage" // answers bytes that are no challenge
)

// startStrays upgrades n stray peers on the rig's listener. Each reads
// auth_hello (when the runner sends one) and then behaves as kind, until the
// returned stop closes it.
func startStrays(t *testing.T, r *simRig, kind strayKind, n int) (stop func()) {
	t.Helper()
	var wg sync.WaitGroup
	var conns []*prp.PeerConn
	for range n {
		d := pipeDialer(t, r.ln, &r.wg, nil, r.ln.Path())
		c, err := d.DialPeer(context.Background())
		require.NoError(t, err)
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ReadMsg(context.Background()); err != nil {
				return
			}
			switch kind {
			case straySlow:
				time.Sleep(prp.AuthMessageTimeout - time.Millisecond)
				_ = c.WriteMsg(context.Background(), []byte(`{"protocol":"paperclip.runner","version":2,"kind":"auth_challenge","payload":{}}`))
			case strayGarbage:
				_ = c.WriteMsg(context.Background(), []byte("\x00not json{"))
			}
			for { // hold the socket until the runner or stop drops it
				if _, err := c.ReadMsg(context.Background()); err != nil {
					return
				}
			}
		}()
	}
	synctest.Wait() // every stray is upgraded and parked
	return func() {
		for _, c := range conns {
			_ = c.Close()
		}
		wg.Wait()
	}
}

// TestPRP04_StrayPeersDoNotStarveBootstrap: stray listener peers (silent,
// slow, garbage; 1, 2 and 50 of them) upgrade before the real core. The
// core's bootstrap handshake must not wait for any of them: it
// authenticates in one round trip, which over in-memory pipes in a synctest
// bubble takes no simulated time (prp.md §1.2: a stray peer MUST NOT
// disturb; a stray holding the bootstrap slot would delay it by its
// 2 s auth bound). The ticket is used once, by the core.
func TestPRP04_StrayPeersDoNotStarveBootstrap(t *testing.T) {
	for _, kind := range []strayKind{straySilent, straySlow, strayGarbage} {
		for _, n := range []int{1, 2, 50} {
			t.Run(fmt.Sprintf("%s_%d", kind, n), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := newSimListenRig(t, nil, nil)
					stop := startStrays(t, r, kind, n)
					start := time.Now()
					err := r.dial(t)
					if err == nil {
						r.waitAuth(t, 1)
					}
					took := time.Since(start)
					stop() // clean up first: a failed require inside the bubble would strand goroutines
					require.ErrorIs(t, r.stop(), context.Canceled)
					require.NoError(t, err, "the core's handshake timed out behind a stray peer")
					require.Zero(t, took, "the core's bootstrap waited for a stray peer")
					require.True(t, r.user.welcomes[0].Bootstrapped)
				})
			})
		}
	}
}

// TestPRP04_TwoProversSerialize: two peers that both hold the ticket's key
// (the core reconnecting while its first bootstrap is in flight) run
// auth_response one at a time; the second, finding the ticket spent, is
// dropped without sending auth_response and without failing the runner.
func TestPRP04_TwoProversSerialize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSimListenRig(t, nil, nil)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- r.dial(t) }()
		}
		// Both dials may succeed: when the first bootstrap finishes before
		// the second core handshake starts, the core already holds the
		// lease and the second is a lease reconnect. What must never
		// happen is a second bootstrap of the one ticket.
		ok := 0
		for range 2 {
			if err := <-errs; err == nil {
				ok++
			}
		}
		require.GreaterOrEqual(t, ok, 1, "one bootstrap succeeds")
		r.waitAuth(t, ok)
		synctest.Wait()
		require.Len(t, r.user.welcomes, ok)
		boots := 0
		for _, w := range r.user.welcomes {
			if w.Bootstrapped {
				boots++
			}
		}
		require.Equal(t, 1, boots, "the ticket bootstraps exactly once")
		select {
		case err := <-r.done:
			t.Fatalf("runner ended: %v", err)
		default:
		}
		require.NoError(t, r.dial(t), "the lease reconnect still works")
		r.waitAuth(t, ok+1)
		require.False(t, r.user.welcomes[ok].Bootstrapped)
		require.ErrorIs(t, r.stop(), context.Canceled)
	})
}

// BenchmarkListenBootstrapWithStrays measures, over loopback, how long the
// core's bootstrap takes while 0, 2 or 50 silent stray peers hold upgraded
// connections that took auth_hello: the figures that show strays do not
// starve a bootstrap.
//
//	go test -run '^$' -bench BenchmarkListenBootstrapWithStrays -benchtime 20x ./internal/prp/
func BenchmarkListenBootstrapWithStrays(b *testing.B) {
	for _, n := range []int{0, 2, 50} {
		b.Run(fmt.Sprintf("strays=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				benchBootstrapOnce(b, n)
			}
		})
	}
}

func benchBootstrapOnce(b *testing.B, strays int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := prp.Listen(prp.ListenConfig{Address: "127.0.0.1", Port: 0, Path: prp.ConnectPath(runnerIdentity.RunID)})
	require.NoError(b, err)
	defer ln.Close()
	url := "ws://" + ln.Addr().String() + ln.Path()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(b, err)
	u := newRunnerUser()
	cfg := prp.ClientConfig{Listener: ln, Ticket: ticket}
	u.hooks(&cfg)
	_, done := startClient(b, ctx, cfg)
	var held []*websocket.Conn
	for range strays {
		c, _, err := websocket.Dial(ctx, url, nil)
		require.NoError(b, err)
		held = append(held, c)
	}
	for _, c := range held { // each took its auth_hello and stays silent
		_, _, err := c.Read(ctx)
		require.NoError(b, err)
	}
	b.StartTimer()
	require.NoError(b, core.Connect(ctx, url))
	u.waitFor(ctx, b, "bootstrap", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	b.StopTimer()
	for _, c := range held {
		_ = c.CloseNow()
	}
	cancel()
	<-done
}
