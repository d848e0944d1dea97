package bridge

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// The stdout-mode stream parser: partial lines are buffered, blank and bad
// lines skipped, and a frame whose seq is not above the last delivered one
// is dropped, so the settle-time re-parse delivers nothing twice.
func TestLineParserDedupesBySeq(t *testing.T) {
	var got []string
	p := &lineParser{deliver: func(f frame.Frame) { got = append(got, string(f.AppendJSON(nil))) }}
	all := []byte(`{"seq":1,"type":"data","stream":"stdout","data":"YQ=="}` + "\n\nnot json\n" +
		`{"seq":2,"type":"exit","code":0,"signal":null}` + "\n" + `{"type":"shutdownAck"}`)
	p.feed(all[:10])
	p.feed(all[10:])
	p.reparse(all)
	assert.Equal(t, []string{
		`{"seq":1,"type":"data","stream":"stdout","data":"YQ=="}`,
		`{"seq":2,"type":"exit","code":0,"signal":null}`,
		// Unterminated while streaming; the settle-time re-parse delivers it.
		`{"type":"shutdownAck"}`,
	}, got)
	assert.True(t, p.sawEnd)
}

// FuzzLineParser feeds arbitrary stream bytes split at an arbitrary point.
func FuzzLineParser(f *testing.F) {
	f.Add([]byte(`{"seq":1,"type":"data","stream":"stdout","data":"YQ=="}`+"\n"), 5)
	f.Add([]byte("{\"seq\":2.5,\"type\":\"exit\"}\n{\"seq\":\"3\",\"type\":\"error\"}\n\n"), 0)
	f.Add([]byte("\x00\xff{\n}"), 3)
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		var seqs []int64
		p := &lineParser{deliver: func(f frame.Frame) {
			if f.Seq != 0 {
				seqs = append(seqs, f.Seq)
			}
		}}
		split = min(max(split, 0), len(b))
		p.feed(b[:split])
		p.feed(b[split:])
		p.reparse(bytes.Clone(b))
		for i := 1; i < len(seqs); i++ {
			assert.Greater(t, seqs[i], seqs[i-1], "numeric seqs are delivered strictly increasing")
		}
	})
}
