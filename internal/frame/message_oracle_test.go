package frame

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseMessageJSON is the general path, the one-pass decoder's
// oracle: encoding/json with object
// semantics (a map keeps keys case-sensitive and lets the last duplicate
// win, as JavaScript does), not an Unmarshal into a struct, which matches
// keys case-insensitively.
func parseMessageJSON(content []byte) (Message, error) {
	if len(content) == 0 {
		return Message{}, errEmptyStdinFile
	}
	var raw json.RawMessage
	if err := json.Unmarshal(content, &raw); err != nil {
		return Message{}, jsonError(err)
	}
	if raw[0] != '{' {
		return Message{}, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Message{}, jsonError(err)
	}
	var t string
	if v, ok := obj["type"]; ok && v[0] == '"' {
		_ = json.Unmarshal(v, &t)
	}
	m := Message{Type: t}
	if t == MsgStdin {
		v, ok := obj["data"]
		var s string
		if !ok || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			m.BadData = true
			return m, nil
		}
		m.Data = DecodeBase64(s)
	}
	return m, nil
}

// jsonError is the oracle's wording of a JSON error: a syntax error names
// its offset, anything else its kind.
func jsonError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at offset %d", se.Offset)
	}
	return errors.New("invalid JSON")
}

// sameAsOracle fails t unless ParseMessageInto answers b as the oracle
// does: the same message (nil and empty payloads alike) or the same error
// text.
func sameAsOracle(t *testing.T, b, dst []byte) {
	t.Helper()
	want, werr := parseMessageJSON(b)
	got, gerr := ParseMessageInto(b, dst)
	if werr != nil || gerr != nil {
		if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
			t.Fatalf("%q: error %v, oracle %v", b, gerr, werr)
		}
		return
	}
	if got.Type != want.Type || got.BadData != want.BadData || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("%q: got %+v, oracle %+v", b, got, want)
	}
}

// oracleCases are shapes the decoder must get right; each is also a fuzz
// seed.
var oracleCases = []string{
	`{"type":"stdin","data":"aGk="}`,
	`{"type": "stdin", "data": "aGk="}`,
	"\t{ \"data\" :\r\n\"aGk=\" , \"type\" : \"stdin\" }\n",
	`{"type":"stdin","data":"aGk=","x":[1,{"y":null}],"z":-0.5e+7}`,
	`{"type":"stdin","data":"aGk=","data":"aGVsbG8="}`,
	`{"type":"stdin","data":"aGk=","data":5}`,
	`{"type":"stdin","data":5,"data":"aGk="}`,
	`{"type":"stdin","type":"shutdown"}`,
	`{"type":"shutdown","type":7}`,
	`{"typ\u0065":"std\u0069n","d\u0061ta":"aGk\u003d"}`,
	`{"type":"stdin","data":"aG\/k\n="}`,
	`{"type":"stdin","data":"aGVs\u0000bG8"}`,
	`{"type":"stdin","data":"a\u00e9G\ud83d\ude00k\ud800="}`,
	`{"type":"stdin","data":"aGk` + "\xff\xfe" + `="}`,
	`{"type":"std` + "\xff" + `in"}`,
	`{"type":"` + "\xed\xa0\x80" + `"}`,
	`{"type":"\ud800\u0041\udc00\ud83d\ude00"}`,
	`{"type":"stdin","data":"-_8"}`,
	`{"type":"stdin","data":"aGk=\naGk="}`,
	`{"type":"stdin","data":"aG\u003dk"}`,
	`{"type":"stdin","data":"a Gk"}`,
	`{"type":"stdin","data":""}`,
	`{"type":"stdin"}`,
	`{"Type":"stdin","data":"aGk="}`,
	`{"type":"stdin","data":"aGk="} x`,
	`{"type":"stdin","data":"aGk="}}`,
	"\xef\xbb\xbf" + `{"type":"stdin","data":"aGk="}`,
	`{"type":"stdin","data":"aG` + "\n" + `k="}`,
	`{"type":"stdin","data":"aGk=`,
	`{"type":"stdin","data":"aGk=\`,
	`{"type":"stdin","data":"\u12"}`,
	`{"type":"stdin","data":"\x"}`,
	`{"type":"stdin",}`,
	`{"type" "stdin"}`,
	`{,}`, `{`, `{}`, ` {} `, `[]`, `[1,]`, `[,1]`, `"x"`, `1`, `-`, `-01`, `01`, `1.`, `1.e5`, `1e`, `1e+`, `2E-3 `,
	`tru`, `truex`, `nul`, `[true,false,null]`, `   `, "\n", `{"a":{"b":[]},"type":"shutdown"}`,
	`{"a":[{"b":{}},[[]],{}],"type":"stdinEnd"}`, `{"a" : [ 1 , 2 ] , "type" : "x" }`,
	`{"a":"\"\\\/\b\f\n\r\t"}`, `{"a":"` + "\x1f" + `"}`, `{"a":1 2}`, `{"a":[1 2]}`, `{"a"}`, `{1:2}`,
}

func TestParseMessageMatchesOracle(t *testing.T) {
	for _, c := range oracleCases {
		sameAsOracle(t, []byte(c), nil)
		sameAsOracle(t, []byte(c), make([]byte, 64))
	}
}

// TestParseMessageDepthMatchesOracle: nesting at and past encoding/json's
// limit, in an unknown member and at the top level.
func TestParseMessageDepthMatchesOracle(t *testing.T) {
	for _, n := range []int{maxJSONDepth - 2, maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		nested := strings.Repeat("[", n) + strings.Repeat("]", n)
		sameAsOracle(t, []byte(nested), nil)
		sameAsOracle(t, []byte(`{"a":`+nested+`,"type":"shutdown"}`), nil)
		objs := strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n)
		sameAsOracle(t, []byte(objs), nil)
		sameAsOracle(t, []byte(`{"type":"shutdown","a":`+objs+`}`), nil)
	}
	m, err := ParseMessage([]byte(`{"a":` + strings.Repeat("[", maxJSONDepth-1) + strings.Repeat("]", maxJSONDepth-1) + `,"type":"shutdown"}`))
	require.NoError(t, err, "the deepest nesting encoding/json accepts")
	assert.Equal(t, MsgShutdown, m.Type)
}

// TestParseMessageShapesDecodeInPlace: every key order and white space a
// writer may produce decodes into the caller's buffer.
func TestParseMessageShapesDecodeInPlace(t *testing.T) {
	for _, body := range []string{
		`{"type":"stdin","data":"aGVsbG8sIHdvcmxk"}` + "\n",
		`{"type": "stdin", "data": "aGVsbG8sIHdvcmxk"}`,
		` { "data" : "aGVsbG8sIHdvcmxk" , "type":"stdin", "extra": {"k": [1, 2.5, "s"]} } ` + "\n",
	} {
		dst := make([]byte, 64)
		m, err := ParseMessageInto([]byte(body), dst)
		require.NoError(t, err, body)
		assert.Equal(t, "hello, world", string(m.Data), body)
		assert.Same(t, &dst[0], &m.Data[0], "decoded into dst: %s", body)
	}
}

// FuzzParseMessageOracle: the one-pass decoder answers every input as
// encoding/json does, refusals and their offsets included.
func FuzzParseMessageOracle(f *testing.F) {
	for _, c := range oracleCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sameAsOracle(t, b, nil)
		sameAsOracle(t, b, make([]byte, 5))
	})
}
