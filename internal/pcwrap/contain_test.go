package pcwrap

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseOOMScoreAdj(t *testing.T) {
	for in, want := range map[string]int{"500": 500, " -1000 ": -1000, "1000": 1000, "0": 0} {
		got, err := ParseOOMScoreAdj(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "1001", "-1001", "5e2", "lots", "0x10"} {
		_, err := ParseOOMScoreAdj(bad)
		assert.Error(t, err, bad)
	}
}

// FuzzParseOOMScoreAdj: the flag and the variable are untrusted input;
// a value is accepted only within -1000..1000, and the error is bounded.
func FuzzParseOOMScoreAdj(f *testing.F) {
	f.Add("500")
	f.Add("-1000")
	f.Add("9999999999999999999999")
	f.Fuzz(func(t *testing.T, v string) {
		n, err := ParseOOMScoreAdj(v)
		if err != nil {
			if len(err.Error()) > 100+len(strconv.Quote(v)) {
				t.Fatalf("unbounded error %q", err)
			}
			return
		}
		if n < minOOMScoreAdj || n > maxOOMScoreAdj {
			t.Fatalf("accepted %d", n)
		}
	})
}
