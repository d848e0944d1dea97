package quote

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestTextShortIsPercentQ(t *testing.T) {
	for _, s := range []string{"", "a", "tasks.get", "a\nb", "\xff", strings.Repeat("x", MaxBytes)} {
		require.Equal(t, strconv.Quote(s), Text(s))
	}
}

func TestTextLongIsCutAndSaysSo(t *testing.T) {
	got := Text(strings.Repeat("\xff", 700))
	require.Equal(t, strconv.Quote(strings.Repeat("\xff", MaxBytes))+"… (700 bytes)", got)
}

// TestTextNeverSplitsARune: a cut that would fall inside a multi-byte
// character backs up to its start.
func TestTextNeverSplitsARune(t *testing.T) {
	s := strings.Repeat("a", MaxBytes-1) + "é" + "tail"
	got := Text(s)
	require.Equal(t, strconv.Quote(strings.Repeat("a", MaxBytes-1))+"… (205 bytes)", got)
}

// FuzzText: the quoted form is valid UTF-8 without raw control bytes, at
// most a fixed size, and a prefix of the input unquotes from it.
func FuzzText(f *testing.F) {
	f.Add("tasks.get")
	f.Add(strings.Repeat("\xff", 700))
	f.Add(strings.Repeat("\U0010ffff", 100))
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\x00\n\r") || len(got) > 4*MaxBytes+32 {
			t.Fatalf("unbounded or unclean (%d bytes): %s", len(got), got)
		}
		q := got
		if i := strings.LastIndex(got, "… ("); i >= 0 && len(s) > MaxBytes {
			q = got[:i]
		}
		prefix, err := strconv.Unquote(q)
		if err != nil || !strings.HasPrefix(s, prefix) {
			t.Fatalf("%s does not unquote to a prefix of the input: %v", got, err)
		}
	})
}
