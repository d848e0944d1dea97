package frame

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func intp(i int) *int { return &i }

func TestFrameAppendJSONMatchesJSONStringify(t *testing.T) {
	cases := []struct {
		name string
		f    Frame
		want string
	}{
		{"data", DataFrame(StreamStdout, []byte("hello")), `{"type":"data","stream":"stdout","data":"aGVsbG8="}`},
		{"data empty", DataFrame(StreamStderr, nil), `{"type":"data","stream":"stderr","data":""}`},
		{"exit code", ExitFrame(intp(0), ""), `{"type":"exit","code":0,"signal":null}`},
		{"exit signal", ExitFrame(nil, "SIGTERM"), `{"type":"exit","code":null,"signal":"SIGTERM"}`},
		{"error", ErrorFrame(`spawn <x> "y" ENOENT`), `{"type":"error","message":"spawn <x> \"y\" ENOENT"}`},
		{"error controls", ErrorFrame("a\nb\t\x01\u2028&"), `{"type":"error","message":"a\nb\t\u0001` + "\u2028" + `&"}`},
		{"ack", ShutdownAckFrame(), `{"type":"shutdownAck"}`},
		{"seq first", Frame{Seq: 7, Type: FrameShutdownAck}, `{"seq":7,"type":"shutdownAck"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, string(tc.f.AppendJSON(nil)))
			// Through encoding/json only with HTML escaping off (json.Marshal
			// re-escapes a Marshaler's output).
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			require.NoError(t, enc.Encode(tc.f))
			assert.Equal(t, tc.want+"\n", buf.String())
			b := tc.f.AppendJSON(nil)
			got, err := ParseFrame(b)
			require.NoError(t, err)
			if len(tc.f.Data) == 0 {
				got.Data = tc.f.Data
			}
			assert.Equal(t, tc.f, got)
		})
	}
}

func TestParseFrameUnknownType(t *testing.T) {
	f, err := ParseFrame([]byte(`{"type":"bogus"}`))
	require.ErrorIs(t, err, ErrUnknownFrameType)
	assert.Equal(t, "bogus", f.Type)
	_, err = ParseFrame([]byte(`{"type":"exit","code":1.5}`))
	require.Error(t, err)
	_, err = ParseFrame([]byte(`not json`))
	require.Error(t, err)
}

func TestParseMessage(t *testing.T) {
	cases := []struct {
		in      string
		want    Message
		wantErr bool
	}{
		{`{"type":"stdin","data":"aGk="}` + "\n", Message{Type: MsgStdin, Data: []byte("hi")}, false},
		{` {"type":"stdinEnd"} `, Message{Type: MsgStdinEnd}, false},
		{`{"type":"shutdown"}`, Message{Type: MsgShutdown}, false},
		{`{"type":"stdin","data":5}`, Message{Type: MsgStdin, BadData: true}, false},
		{`{"TYPE":"shutdown"}`, Message{}, false},
		{`[1,2]`, Message{}, false},
		{`"x"`, Message{}, false},
		{`{"type":"stdin","data":"a Gk\n"}`, Message{Type: MsgStdin, Data: []byte("hi")}, false},
		{`{"type":"x","n":1e400}`, Message{Type: "x"}, false},
		{``, Message{}, true},
		{`{"type":"stdin"`, Message{}, true},
		{`{"type":"stdin","data":"secret"} trailing`, Message{}, true},
	}
	for _, tc := range cases {
		got, err := ParseMessage([]byte(tc.in))
		if tc.wantErr {
			require.Error(t, err, tc.in)
			assert.NotContains(t, err.Error(), "secret")
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	_, err := ParseMessage(nil)
	assert.True(t, errors.Is(err, errEmptyStdinFile))
	assert.Equal(t, "stdin file is empty", err.Error())
}

func TestMessageAppendJSON(t *testing.T) {
	assert.Equal(t, `{"type":"stdin","data":"aGk="}`+"\n", string(Message{Type: MsgStdin, Data: []byte("hi")}.AppendJSON(nil)))
	assert.Equal(t, `{"type":"stdinEnd"}`+"\n", string(Message{Type: MsgStdinEnd}.AppendJSON(nil)))
}

func TestDecodeBase64Lenient(t *testing.T) {
	cases := map[string]string{
		"aGVsbG8=":     "hello",
		"aGVsbG8":      "hello",
		"aGVs\nbG8=\n": "hello",
		" a G V s ":    "hel",
		"aGVsbG8=junk": "hello",
		"-_8":          "\xfb\xff",
		"":             "",
		"a":            "",
	}
	for in, want := range cases {
		assert.Equal(t, want, string(DecodeBase64(in)), "%q", in)
	}
}

func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{`{"type":"stdin","data":"aGk="}`, `{"type":"stdinEnd"}`, `{"type":"shutdown"}`, ``, `{`, `[]`, `{"type":"stdin","data":null}`} {
		f.Add([]byte(s))
	}
	f.Add([]byte(` {"type":"stdin","data":"aGk-_="} ` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMessage(b)
		if err != nil {
			return
		}
		if m.Type == MsgStdin && !m.BadData {
			// Re-encoding and parsing again must give the same bytes.
			m2, err := ParseMessage(m.AppendJSON(nil))
			if err != nil || string(m2.Data) != string(m.Data) {
				t.Fatalf("round trip failed: %v", err)
			}
		}
	})
}

func FuzzDecodeBase64(f *testing.F) {
	for _, s := range []string{"aGVsbG8=", "aGVsbG8", "a b\nc", "-_", "===", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := DecodeBase64(s)
		enc := base64.StdEncoding.EncodeToString(out)
		if string(DecodeBase64(enc)) != string(out) {
			t.Fatal("re-decode differs")
		}
	})
}

func FuzzParseFrame(f *testing.F) {
	for _, s := range []string{`{"type":"data","stream":"stdout","data":"aGk="}`, `{"seq":3,"type":"exit","code":0,"signal":null}`, `{"type":"error","message":"x"}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Add([]byte(` {"seq":12,"type":"data","stream":"stderr","data":"aGk-_="} ` + "\n"))
	f.Add([]byte(`{"seq":0,"type":"data","stream":"stdout","data":""}`))
	f.Add([]byte(`{"seq":01,"type":"data","stream":"stdout","data":"aGk="}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		// A dirty recycled buffer, as a consumer passes it, must not
		// change the answer.
		dirty := bytes.Repeat([]byte{'#'}, len(b))
		if into, err := ParseFrameInto(b, dirty); err == nil {
			plain, err := ParseFrame(b)
			if err != nil || into.Seq != plain.Seq || into.Type != plain.Type || into.Stream != plain.Stream || !bytes.Equal(into.Data, plain.Data) {
				t.Fatalf("ParseFrameInto differs: %+v vs %+v, %v", into, plain, err)
			}
		}
		if fast, ok := parseDataFast(b, nil); ok {
			var slow Frame
			if err := slow.UnmarshalJSON(b); err != nil {
				t.Fatalf("fast path accepted what the general path refuses: %v", err)
			}
			if fast.Seq != slow.Seq || fast.Type != slow.Type || fast.Stream != slow.Stream || !bytes.Equal(fast.Data, slow.Data) {
				t.Fatalf("fast path differs: %+v vs %+v", fast, slow)
			}
		}
		fr, err := ParseFrame(b)
		if err != nil {
			return
		}
		again, err := ParseFrame(fr.AppendJSON(nil))
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		if string(again.AppendJSON(nil)) != string(fr.AppendJSON(nil)) {
			t.Fatal("not stable")
		}
	})
}

func TestParseMessageIntoReusesDst(t *testing.T) {
	body := Message{Type: MsgStdin, Data: []byte("hello, world")}.AppendJSON(nil)
	dst := make([]byte, 64)
	m, err := ParseMessageInto(body, dst)
	require.NoError(t, err)
	assert.Equal(t, "hello, world", string(m.Data))
	assert.Same(t, &dst[0], &m.Data[0], "decoded into dst")
	small := make([]byte, 2)
	m, err = ParseMessageInto(body, small)
	require.NoError(t, err)
	assert.Equal(t, "hello, world", string(m.Data))
	assert.Equal(t, "hi", string(append(small[:0], "hi"...)), "dst too small: left alone")
}

func TestParseFrameIntoReusesDst(t *testing.T) {
	line := append(Frame{Seq: 9, Type: FrameData, Stream: StreamStdout, Data: []byte("hello, world")}.AppendJSON(nil), '\n')
	dst := make([]byte, 64)
	f, err := ParseFrameInto(line, dst)
	require.NoError(t, err)
	assert.Equal(t, "hello, world", string(f.Data))
	assert.Same(t, &dst[0], &f.Data[0], "decoded into dst")
	small := []byte("hi")
	f, err = ParseFrameInto(line, small)
	require.NoError(t, err)
	assert.Equal(t, "hello, world", string(f.Data))
	assert.Equal(t, "hi", string(small), "dst too small: left alone")
}

// TestDataFrameReusedBuffer: a data frame appended to a reused buffer
// holding older, longer bytes is the same as one appended to nil (the
// encoder writes over that room without clearing it first).
func TestDataFrameReusedBuffer(t *testing.T) {
	data := bytes.Repeat([]byte("\x00\xffhello"), 9000)
	f := Frame{Seq: 7, Type: FrameData, Stream: StreamStderr, Data: data}
	want := f.AppendJSON(nil)
	buf := bytes.Repeat([]byte{'#'}, 2*len(want))
	got := f.AppendJSON(buf[:3])
	if !bytes.Equal(got[3:], want) || string(got[:3]) != "###" {
		t.Fatalf("frame in a reused buffer differs")
	}
	if ok := json.Valid(want); !ok {
		t.Fatalf("frame is not JSON")
	}
}
