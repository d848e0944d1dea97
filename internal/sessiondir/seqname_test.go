package sessiondir

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSeqName(t *testing.T) {
	assert.Equal(t, "000000000001.json", SeqName(1))
	assert.Equal(t, "999999999999.json", SeqName(999999999999))
	assert.Equal(t, "1000000000000.json", SeqName(1000000000000))
}

func TestParseSeqJSSemantics(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"000000000001.json", 1, true},
		{"000000000042.json", 42, true},
		{"12abc.json", 12, true},
		{" \t\u00a07.json", 7, true},
		{"-3.json", -3, true},
		{"+5.json", 5, true},
		{"abc.json", 0, false},
		{".json", 0, false},
		{"-.json", 0, false},
		{"", 0, false},
		{"99999999999999999999999.json", 1<<63 - 1, true},
	}
	for _, tc := range cases {
		got, ok := ParseSeq(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func FuzzParseSeq(f *testing.F) {
	for _, s := range []string{"000000000001.json", "-1.json", " 5", "abc", "99999999999999999999999", "\u30001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		seq, ok := ParseSeq(name)
		if !ok && seq != 0 {
			t.Fatalf("NaN with value %d", seq)
		}
		if ok && seq > 0 && seq < 1e12 {
			got, ok2 := ParseSeq(SeqName(seq))
			if !ok2 || got != seq {
				t.Fatalf("round trip %d -> %q -> %d", seq, SeqName(seq), got)
			}
		}
	})
}
