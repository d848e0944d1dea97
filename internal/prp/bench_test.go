package prp_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// benchPair connects a dial-mode Client to a Core over real loopback sockets.
// answer, when set, replies to every command with a completed result.
func benchPair(b *testing.B, answer bool, mod ...func(*prp.ClientConfig)) (*control.Core, *prp.Client, func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	core := newTestCore(func(c *control.Config) { c.LeaseTTL = time.Hour })
	ticket, err := core.MintTicket()
	require.NoError(b, err)
	authed := make(chan struct{}, 1)
	cfg := prp.ClientConfig{
		Dialer: dialTargetB(b, core), Ticket: ticket,
		OnAuthenticated: func(context.Context, *prp.Conn, *prp.Welcome) error { kick(authed); return nil },
		OnControl: func(ctx context.Context, c *prp.Conn, env *prp.Envelope) error {
			if answer && env.Kind == prp.KindCommand {
				var cmd prp.Command
				if err := json.Unmarshal(env.Payload, &cmd); err != nil {
					return err
				}
				p, _ := jsonenc.Marshal(prp.CommandResultPayload{CommandID: cmd.CommandID, ControllerSeq: cmd.ControllerSeq,
					CommandType: cmd.Type, Status: "completed", Result: json.RawMessage(`{}`)})
				out, _ := prp.MarshalEnvelope(prp.NewEventEnvelope(prp.KindCommandResult, env.Version, runnerIdentity, p))
				return c.Send(ctx, out)
			}
			return nil
		},
	}
	for _, m := range mod {
		m(&cfg)
	}
	client, done := startClient(b, ctx, cfg)
	<-authed
	require.NoError(b, core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected }))
	return core, client, func() {
		cancel()
		<-done
		core.Close()
	}
}

// report prints p50 and p99 of the samples as benchmark metrics.
func report(b *testing.B, samples []time.Duration, unit string) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	p := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Microseconds())
	}
	b.ReportMetric(p(0.50), "p50-"+unit)
	b.ReportMetric(p(0.99), "p99-"+unit)
}

// BenchmarkRoundTripCommand: over loopback sockets the core queues a
// command, the runner's OnControl answers with a command_result, and the core
// records it. Target: p50 < 200 µs (issue). Prints p50/p99 in µs.
func BenchmarkRoundTripCommand(b *testing.B) {
	core, _, stop := benchPair(b, true)
	defer func() { stop() }() // stop is replaced when the journal fills
	ctx := context.Background()
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 && i%control.MaxCommands == 0 { // the core journal bound: start over on a fresh pair
			b.StopTimer()
			stop()
			core, _, stop = benchPair(b, true)
			b.StartTimer()
		}
		t0 := time.Now()
		cmd, err := core.QueueCommand(prp.Command{Type: "session.snapshot"})
		if err != nil {
			b.Fatal(err)
		}
		if err := core.Wait(ctx, func(s control.Snapshot) bool { return s.Results[cmd.CommandID] != nil }); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
	}
	b.StopTimer()
	report(b, samples, "µs")
}

// BenchmarkPingDuringEventFlood: the runner floods 10,000 events while the
// core sends a PRP ping every millisecond. "runner" figures are the time
// from the ping's arrival at the runner's reader to its pong leaving the
// writer; "e2e" figures add both directions of the wire and the core's own
// reader, queued behind the flood in one TCP stream, which the runner's
// send window (window.go) bounds. Target: e2e p99 < 5 ms, so that a ping
// behind a flood still answers well inside the silence timeout.
// Prints p50/p99 in µs.
func BenchmarkPingDuringEventFlood(b *testing.B) {
	const floodEvents = 10000
	ctx := context.Background()
	events := make([][]byte, floodEvents)
	for i := range events {
		events[i] = eventEnvelope(b, int64(i+1))
	}
	var samples []time.Duration
	var runnerMu sync.Mutex
	var runner []time.Duration
	observe := func(c *prp.ClientConfig) {
		prp.SetPongSent(c, func(d time.Duration) { runnerMu.Lock(); runner = append(runner, d); runnerMu.Unlock() })
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		core, client, stop := benchPair(b, false, observe)
		b.StartTimer()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, e := range events {
				if err := client.Send(ctx, e); err != nil {
					return
				}
			}
		}()
		pongs := 0
		for core.Snapshot().AckedSourceSeq < floodEvents {
			t0 := time.Now()
			if err := core.Ping(ctx); err != nil {
				b.Fatal(err)
			}
			pongs++
			want := pongs
			if err := core.Wait(ctx, func(s control.Snapshot) bool { return s.Pongs >= want }); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(t0))
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		b.StopTimer()
		stop()
		b.StartTimer()
	}
	b.StopTimer()
	report(b, samples, "e2e-µs")
	runnerMu.Lock()
	report(b, runner, "runner-µs")
	runnerMu.Unlock()
	b.ReportMetric(float64(len(samples))/float64(b.N), "pings/flood")
}
