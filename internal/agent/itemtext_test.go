package agent

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// TestOpenItemTextLeavesTheRecord: while an assistant message grows to
// about 60 KiB chunk by chunk, each commit hands the Sink the record
// without the text and only the bytes the text gained: the record does
// not grow with the open text, and every text byte is handed over once.
// A restart mid-message (the manager closes, a new one resumes what the
// Sink holds) still ends the item with the whole text.
func TestOpenItemTextLeavesTheRecord(t *testing.T) {
	const chunks = 300
	bulk := strings.Repeat("x", 56<<10)
	r := newRig(t)
	r.prepare()
	r.open()
	// Small chunks, one of 56 KiB, small chunks again, all one message.
	r.turn("chunks " + strconv.Itoa(chunks) + " ;; echo " + bulk + " ;; chunks " + strconv.Itoa(chunks) + " ;; sleep 5000")
	var want strings.Builder
	for i := range chunks {
		want.WriteString(strconv.Itoa(i) + ",")
	}
	want.WriteString(bulk)
	for i := range chunks {
		want.WriteString(strconv.Itoa(i) + ",")
	}
	r.sink.waitFor(t, "the chunks committed", func(Stored, []provider.Event) bool {
		r.sink.mu.Lock()
		defer r.sink.mu.Unlock()
		return len(r.sink.texts) == 1 && strings.HasPrefix(slices.Collect(maps.Values(r.sink.texts))[0], want.String())
	})
	r.m.Close()

	st, _ := r.sink.snapshot()
	r.sink.mu.Lock()
	written := slices.Clone(r.sink.written)
	r.sink.mu.Unlock()
	var early, late []int
	handed := 0
	for _, w := range written {
		handed += w.chunks
		switch {
		case w.texts > 0 && w.texts < 16<<10:
			early = append(early, w.record)
		case w.texts > 50<<10:
			late = append(late, w.record)
		}
	}
	require.NotEmpty(t, early)
	require.NotEmpty(t, late)
	median := func(s []int) float64 { slices.Sort(s); return float64(s[len(s)/2]) }
	t.Logf("%d commits; record bytes: median %.0f with under 16 KiB of open text, %.0f with over 50 KiB",
		len(written), median(early), median(late))
	require.LessOrEqual(t, median(late)/median(early), 1.5, "the record must not grow with the open text")
	require.Equal(t, written[len(written)-1].texts, handed, "each text byte is handed to the Sink once")

	m2 := NewManager(r.cfg, st)
	r.m = m2 // the rig's cleanup shuts it down
	require.NoError(t, m2.Start())
	evs := r.sink.waitEvent(t, "run.terminal")
	var completed []string
	for _, e := range evs {
		if e.EventType == "item.completed" && e.Payload["kind"] == "assistant_message" {
			completed = append(completed, e.Payload["text"].(string))
		}
	}
	require.Equal(t, []string{want.String() + "slept 5000 ms"}, completed)
}

// TestTakeTexts: the first commit of an item hands its whole text, the
// next ones what it gained; an item without text is not listed; the
// encoded copy loses the texts and the Manager's does not; after a
// commit without a process (the Sink drops every text) an item starts
// again from its whole text.
func TestTakeTexts(t *testing.T) {
	msg := &provider.ItemState{ItemID: "t-item-1", Kind: "assistant_message", Text: "hello"}
	tool := &provider.ItemState{ItemID: "t-item-2", Kind: "tool_call"}
	p := &provider.ProcessRecord{Map: provider.MapState{Items: map[string]*provider.ItemState{"m": msg, "tool": tool}}}

	texts, enc, lens := textLens{}.takeTexts(p)
	require.Equal(t, []ItemText{{ItemID: "t-item-1", Off: 0, Chunk: "hello"}}, texts)
	require.Empty(t, enc.Map.Items["m"].Text)
	require.Equal(t, "hello", msg.Text, "the Manager's copy keeps its text")

	msg.Text += ", world"
	texts, _, lens = lens.takeTexts(p)
	require.Equal(t, []ItemText{{ItemID: "t-item-1", Off: 5, Chunk: ", world"}}, texts)
	texts, _, lens = lens.takeTexts(p)
	require.Equal(t, []ItemText{{ItemID: "t-item-1", Off: 12, Chunk: ""}}, texts, "listed unchanged, so the Sink keeps it")

	texts, enc, lens = lens.takeTexts(nil)
	require.Empty(t, texts)
	require.Nil(t, enc)
	texts, _, _ = lens.takeTexts(p)
	require.Equal(t, []ItemText{{ItemID: "t-item-1", Off: 0, Chunk: "hello, world"}}, texts)

	st := Stored{Session: &provider.Record{Process: &provider.ProcessRecord{Map: provider.MapState{
		Items: map[string]*provider.ItemState{"m": {ItemID: "t-item-1"}, "old": {ItemID: "t-item-0", Text: "inline"}}}}}}
	st.RestoreTexts(func(id string) (string, bool) {
		return map[string]string{"t-item-1": "hello, world"}[id], id == "t-item-1"
	})
	require.Equal(t, "hello, world", st.Session.Process.Map.Items["m"].Text)
	require.Equal(t, "inline", st.Session.Process.Map.Items["old"].Text, "a record that holds its text keeps it")
}
