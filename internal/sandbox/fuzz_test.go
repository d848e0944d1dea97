package sandbox

import "testing"

// FuzzParsers: no input panics a statistics-file decoder, and a value it
// accepts is a number a payload can carry.
func FuzzParsers(f *testing.F) {
	for _, s := range []string{"usage_usec 1\n", "max\n", "12\n", "0.5 0.4 0.3 1/2 3\n", "", "usage_usec x", "1e400"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := ParseCPUStat(b); err == nil && (v < 0 || v != v) {
			t.Fatalf("cpu %v", v)
		}
		_, _ = ParseCounter(b)
		_, _, _ = ParseLimit(b)
		if v, err := ParseLoadAvg(b); err == nil && (v < 0 || v != v || v > 1e9) {
			t.Fatalf("load %v", v)
		}
	})
}
