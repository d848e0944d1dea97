package agent

import (
	"maps"
	"slices"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// ItemText is one open item's accumulated text as a commit hands it to
// the Sink, apart from the record: the record leaves every item's text
// out, so a step does not re-encode and rewrite up to 64 KiB per open
// item for a chunk of a few bytes. Chunk is the text from byte Off on:
// Off 0 carries the whole text (the first commit of a Manager, which
// cannot know what the Sink holds), any other Off what the item gained
// since the Manager's previous commit, whose text ended at Off. Each
// commit lists every item that has text; the Sink forgets the texts of
// items a commit does not list.
type ItemText struct {
	ItemID string
	Off    int
	Chunk  string
}

// textLens is what the Manager's commits handed the Sink so far: each
// listed item's text length, by item id.
type textLens map[string]int

// takeTexts lists p's item texts as a commit hands them to the Sink and
// returns p without them (p itself is not changed; nil stays nil: no
// item, so no text), and the lengths the list leaves behind.
func (l textLens) takeTexts(p *provider.ProcessRecord) ([]ItemText, *provider.ProcessRecord, textLens) {
	next := textLens{}
	if p == nil {
		return nil, nil, next
	}
	c := *p
	c.Map.Items = maps.Clone(p.Map.Items)
	var out []ItemText
	for _, key := range slices.Sorted(maps.Keys(c.Map.Items)) {
		it := c.Map.Items[key]
		if it == nil || it.Text == "" {
			continue
		}
		off, ok := l[it.ItemID]
		if !ok || off > len(it.Text) {
			off = 0
		}
		out = append(out, ItemText{ItemID: it.ItemID, Off: off, Chunk: it.Text[off:]})
		next[it.ItemID] = len(it.Text)
		stripped := *it
		stripped.Text = ""
		c.Map.Items[key] = &stripped
	}
	return out, &c, next
}

// RestoreTexts puts the item texts a Sink holds apart from the record
// back into st's items, before NewManager resumes st: text returns the
// text of an item id. An item whose text the record itself holds (a
// record written before texts left it) keeps it.
func (st *Stored) RestoreTexts(text func(itemID string) (string, bool)) {
	if st.Session == nil || st.Session.Process == nil {
		return
	}
	for _, it := range st.Session.Process.Map.Items {
		if it == nil || it.Text != "" {
			continue
		}
		if t, ok := text(it.ItemID); ok {
			it.Text = t
		}
	}
}
