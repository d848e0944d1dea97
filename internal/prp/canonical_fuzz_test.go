package prp

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzCanonical: any input either fails cleanly or yields valid JSON that is
// its own canonical form and means what the input meant.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":{"d":[3,2,1],"c":null}}`, `{"\uff61":1,"\ud83d\ude00":2,"é":3}`, `{"lone":"\ud800"}`,
		`[1e21,-0,0.000001,1e-7,5e-324,12345678901234567890]`, `"<script>&</script>"`, `{"a":1,"a":2}`,
		`[[[[[[]]]]]]`, `{"s":"line\u2028sep"}`, `1e400`, `{"x":tru}`, `[1,]`, "\"\x01\"", `  {"k" : [ ] }  `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Canonical(json.RawMessage(data))
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("canonical output is not JSON: %q", out)
		}
		if u, err := CanonicalUnbounded(json.RawMessage(data)); err != nil || string(u) != string(out) {
			t.Fatalf("CanonicalUnbounded differs from Canonical within the bounds: %q vs %q (%v)", u, out, err)
		}
		again, err := Canonical(json.RawMessage(out))
		if err != nil || string(again) != string(out) {
			t.Fatalf("canonical form is not a fixed point: %q -> %q (%v)", out, again, err)
		}
		// Same meaning: encoding/json reads both the same way (it folds lone
		// surrogates to U+FFFD on both sides).
		var a, b any
		if json.Unmarshal(data, &a) == nil {
			if err := json.Unmarshal(out, &b); err != nil {
				t.Fatalf("canonical output unreadable: %v", err)
			}
			if !reflect.DeepEqual(a, b) { // == on numbers: -0 equals 0, as in JavaScript
				t.Fatalf("meaning changed: %v vs %v", a, b)
			}
		}
	})
}

// FuzzFormatJSNumber: the JavaScript formatting of every finite double reads
// back as the same double.
func FuzzFormatJSNumber(f *testing.F) {
	for _, v := range []float64{0, 1, -1, 0.1, 1e21, 1e-7, 123456789012345678, 5e-324, math.MaxFloat64, 1.5e-10} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return
		}
		s := formatJSNumber(v)
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || (back != v && !(v == 0 && back == 0)) {
			t.Fatalf("%v formatted as %q reads back as %v (%v)", v, s, back, err)
		}
		if !json.Valid([]byte(s)) {
			t.Fatalf("%q is not a JSON number", s)
		}
	})
}

// TestCanonicalUnboundedPassesTheBounds: a value past MaxCanonicalNodes is
// refused by Canonical and encoded by CanonicalUnbounded with the same rules.
func TestCanonicalUnboundedPassesTheBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"z":"\u2028","a":[`)
	for i := range MaxCanonicalNodes + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("1.50")
	}
	b.WriteString("]}")
	if _, err := Canonical(json.RawMessage(b.String())); !errors.Is(err, ErrCanonicalTooLarge) {
		t.Fatalf("Canonical: %v, want ErrCanonicalTooLarge", err)
	}
	got, err := CanonicalUnbounded(json.RawMessage(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":[1.5` + strings.Repeat(",1.5", MaxCanonicalNodes) + "],\"z\":\"\u2028\"}"
	if string(got) != want {
		t.Fatalf("CanonicalUnbounded = %.80q..., want %.80q...", got, want)
	}
}
