package provider

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chunkAllocBytes maps n copies of u into st and returns the bytes
// allocated per chunk.
func chunkAllocBytes(mp Mapper, st *MapState, u SessionUpdate, n int) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		mp.Update(st, "turn-1", u)
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
}

// TestChunkCostDoesNotGrowWithText: a chunk appended to an item that
// already holds 256 KiB allocates about what it does on a nearly empty
// item. Appending by concatenation copied the whole text for every chunk:
// 10,000 small chunks of one message allocated hundreds of MiB, and the
// garbage collector that this kept busy stalled the PRP pong while the
// stream ran.
func TestChunkCostDoesNotGrowWithText(t *testing.T) {
	const chunks = 4000
	mp := testMapper()
	small := upd(t, `{"sessionUpdate":"agent_message_chunk","messageId":"m-1","content":{"type":"text","text":"0123456,"}}`)

	st := &MapState{}
	mp.TurnStarted(st, "turn-1")
	mp.Update(st, "turn-1", small)
	short := chunkAllocBytes(mp, st, small, chunks)

	st = &MapState{}
	mp.TurnStarted(st, "turn-1")
	big := small
	big.Content = &ContentBlock{Type: "text", Text: strings.Repeat("x", 256<<10)}
	mp.Update(st, "turn-1", big)
	long := chunkAllocBytes(mp, st, small, chunks)

	it := st.Items[st.LastMessage]
	require.Len(t, it.Text, 256<<10+chunks*len("0123456,"), "every chunk appended")
	require.Equal(t, "x0123456,0123456,", it.Text[256<<10-1:256<<10+16], "in order")
	require.Less(t, long, 3*short, "bytes allocated per chunk: %.0f on a 256 KiB item, %.0f on a short one", long, short)
}

// TestItemTextCopiesStayIntact: a text taken earlier, a copy of the item
// and a cloned record keep their own text whichever of them appends
// next: appends share the bytes they have in common and never overwrite
// them.
func TestItemTextCopiesStayIntact(t *testing.T) {
	it := &ItemState{}
	it.appendText("ab")
	earlier := it.Text

	cp := *it // shares the builder, as a record's shallow copy does
	it.appendText("cd")
	cp.appendText("XY")
	it.appendText("ef")
	cp.appendText("ZW")
	require.Equal(t, "ab", earlier)
	require.Equal(t, "abcdef", it.Text)
	require.Equal(t, "abXYZW", cp.Text)

	st := MapState{Items: map[string]*ItemState{"k": it}}
	cl := st.clone()
	cl.Items["k"].appendText("!")
	it.appendText("?")
	require.Equal(t, "abcdef!", cl.Items["k"].Text)
	require.Equal(t, "abcdef?", it.Text)

	it.Text = "ABCDEF?" // set directly, same length as the builder
	it.appendText("+")
	require.Equal(t, "ABCDEF?+", it.Text)
	it.Text = ""
	it.appendText("new")
	require.Equal(t, "new", it.Text)
	require.Equal(t, "abcdef!", cl.Items["k"].Text)
	require.Equal(t, "abXYZW", cp.Text)
}
