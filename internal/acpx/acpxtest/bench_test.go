package acpxtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// BenchmarkEchoTurnOverPipes measures one "echo" turn round trip with
// fakeacp over pipes (prompt written → update → settled).
func BenchmarkEchoTurnOverPipes(b *testing.B) {
	p := startAgent(b, ConnOptions{})
	ctx := context.Background()
	if err := p.conn.Open(ctx, OpenOptions{Agent: "claude", Command: "fakeacp", Cwd: "/w"}); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		done, err := p.conn.Prompt(fmt.Sprintf("turn-%d", i), "echo hi")
		if err != nil {
			b.Fatal(err)
		}
		for m := range p.conn.Inbox() {
			if m.Kind == provider.KindTurnSettled {
				break
			}
		}
		<-done
	}
}
