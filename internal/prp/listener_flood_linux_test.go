package prp_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/prp"
)

const (
	// floodConns is the flood to survive: about 1,500 half-open
	// connections exhaust an unbounded listener's descriptors at
	// --nofile=1024.
	floodConns = 1500
	// floodFDOverhead is what the test process holds besides the listener's
	// tracked peers: the listening socket, the core's and the runner's ends
	// of the real connection, the flooder's pipes, the runtime's poller, and
	// one peer accepted just before the oldest is evicted.
	floodFDOverhead = 32
	// floodHelperLife bounds the flooder process if the test never releases it.
	floodHelperLife = 60 * time.Second
)

// TestHelperFlood is the flooder process of TestPRP_ListenerFloodKeepsFDsBounded,
// not a test: it opens floodConns silent TCP connections to
// PRP_FLOOD_ADDR, reports "half" and "ready" on stdout, and holds them
// until stdin closes (or floodHelperLife passes).
func TestHelperFlood(t *testing.T) {
	addr := os.Getenv("PRP_FLOOD_ADDR")
	if addr == "" {
		return // the flooder child's body only; not a skip, so none is reported
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range floodConns {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			conns = append(conns, c)
		}
		if i == floodConns/2 {
			fmt.Println("half")
		}
	}
	fmt.Println("ready")
	done := make(chan struct{})
	go func() { _, _ = bufio.NewReader(os.Stdin).ReadString('\n'); close(done) }()
	select {
	case <-done:
	case <-time.After(floodHelperLife):
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// TestPRP_ListenerFloodKeepsFDsBounded: a separate process floods the
// listen port with 1,500 silent TCP connections (loopback, a bounded loop
// that stops by itself); halfway through, the real core connects and
// bootstraps. The listener evicts the oldest silent peers, so this
// process's descriptors stay under maxUnauthenticatedPeers plus a fixed
// overhead, and the core authenticates without waiting
// behind any stray: in less than the 2 s a stray could hold it for. The
// eviction is logged, rate-limited, with the peer's address and no secret.
func TestPRP_ListenerFloodKeepsFDsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := countFDs(t)
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil)) // runnerd's default level
	ln, err := prp.Listen(prp.ListenConfig{Address: "127.0.0.1", Port: 0, Path: prp.ConnectPath(runnerIdentity.RunID), Logger: logger})
	require.NoError(t, err)
	defer ln.Close()
	url := "ws://" + ln.Addr().String() + ln.Path()
	core := newTestCore(nil)
	defer core.Close()
	ticket, err := core.MintTicket()
	require.NoError(t, err)
	u := newRunnerUser()
	cfg := prp.ClientConfig{Listener: ln, Ticket: ticket, Logger: logger}
	u.hooks(&cfg)
	_, done := startClient(t, ctx, cfg)

	// Sample the descriptor count for the whole flood.
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(2 * time.Millisecond)
		defer tk.Stop()
		for {
			if n := int64(countFDs(t)); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stopSampling:
				return
			case <-tk.C:
			}
		}
	}()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperFlood$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PRP_FLOOD_ADDR="+ln.Addr().String())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	waitLine := func(want string) {
		t.Helper()
		for lines.Scan() {
			if strings.TrimSpace(lines.Text()) == want {
				return
			}
		}
		t.Fatalf("flooder ended before %q: %v", want, lines.Err())
	}

	waitLine("half")
	start := time.Now()
	require.NoError(t, core.Connect(ctx, url))
	u.waitFor(ctx, t, "bootstrap under flood", func(u *runnerUser) bool { return len(u.welcomes) == 1 })
	took := time.Since(start)
	waitLine("ready")
	close(stopSampling)
	<-sampled
	t.Logf("bootstrap during a %d-connection flood took %v; peak descriptors %d (baseline %d, cap %d)",
		floodConns, took, peak.Load(), base, prp.MaxUnauthenticatedPeers)
	require.Less(t, took, prp.UpgradeTimeout, "the core waited behind a stray peer")
	require.LessOrEqual(t, int(peak.Load()), base+prp.MaxUnauthenticatedPeers+floodFDOverhead)
	require.LessOrEqual(t, prp.ListenerPeers(ln), prp.MaxUnauthenticatedPeers)

	out := logs.String()
	require.Contains(t, out, `"msg":"listener evicted a connection: too many unauthenticated peers"`)
	require.Contains(t, out, `"peer":"127.0.0.1:`)
	require.Less(t, strings.Count(out, "listener evicted"), 10, "flood lines are rate-limited")
	requireNoSecrets(t, out, ticket, u.welcomes[0].Lease.Token)

	_ = stdin.Close()
	require.NoError(t, cmd.Wait())
	cancel()
	<-done
}
