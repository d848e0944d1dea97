package opencode

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func readAllEvents(t *testing.T, in string, max int) ([]string, error) {
	t.Helper()
	r := newSSEReader(strings.NewReader(in), max)
	var out []string
	for {
		d, err := r.next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, string(d))
	}
}

func TestSSEReaderFraming(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string
	}{
		{"one event", "data: {\"a\":1}\n\n", []string{`{"a":1}`}},
		{"crlf", "data: x\r\n\r\ndata: y\r\n\r\n", []string{"x", "y"}},
		{"bare cr", "data: x\r\rdata: y\r\r", []string{"x", "y"}},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}},
		{"comments and other fields", ": ping\nid: 7\nevent: message\nretry: 10\ndata:x\n\n", []string{"x"}},
		{"no data is no event", "id: 1\n\n\n\ndata: z\n\n", []string{"z"}},
		{"unterminated last event dropped", "data: a\n\ndata: b\n", []string{"a"}},
		{"field without colon", "data\n\n", []string{""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := readAllEvents(t, c.in, 0)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func TestSSEReaderBound(t *testing.T) {
	_, err := readAllEvents(t, "data: "+strings.Repeat("x", 100)+"\n\n", 50)
	require.True(t, errors.Is(err, errEventTooLarge), "%v", err)
	// Many data lines add up to the bound too.
	_, err = readAllEvents(t, strings.Repeat("data: xxxxxxxxxx\n", 10)+"\n", 50)
	require.True(t, errors.Is(err, errEventTooLarge), "%v", err)
}

func TestDecodeEvent(t *testing.T) {
	ev, err := decodeEvent([]byte(`{"id":"evt_1","type":"session.idle","properties":{"sessionID":"ses_1"}}`))
	require.NoError(t, err)
	require.Equal(t, eventSessionIdle, ev.Type)
	for _, bad := range []string{``, `[]`, `{"id":"x"}`, `{"type":"a","properties":[1]}`, `{"type":1}`} {
		_, err := decodeEvent([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestListenURL(t *testing.T) {
	u, p, ok := listenURL([]byte("some log\nopencode server listening on http://127.0.0.1:4096\n"))
	require.True(t, ok)
	require.Equal(t, "http://127.0.0.1:4096", u)
	require.Equal(t, 4096, p)
	_, _, ok = listenURL([]byte("opencode server listening on http://127.0.0.1:40"))
	require.False(t, ok, "an incomplete line is not the port yet")
	for _, bad := range []string{
		"opencode server listening on http://10.0.0.1:4096\n", // not loopback
		"opencode server listening on https://127.0.0.1:4096\n",
		"opencode server listening on http://127.0.0.1:0\n",
		"opencode server listening on http://127.0.0.1\n",
	} {
		_, _, ok := listenURL([]byte(bad))
		require.False(t, ok, bad)
	}
}

func TestNewClientRefusesNonLoopback(t *testing.T) {
	for _, u := range []string{"http://10.1.2.3:4096", "https://127.0.0.1:1", "http://example.com:80", "::"} {
		_, err := newClient(u, "pw")
		require.Error(t, err, u)
	}
	c, err := newClient("http://[::1]:4096/x?y", "pw")
	require.NoError(t, err)
	require.Equal(t, "http://[::1]:4096", c.baseURL())
	c.Close()
}

func TestNewPassword(t *testing.T) {
	a, err := newPassword()
	require.NoError(t, err)
	b, err := newPassword()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	require.Len(t, a, 43) // 32 bytes, base64url without padding
	require.Equal(t, envPassword+"="+a, serverEnv(a))
}

// oneShot hands its bytes over in one read, then reports that nothing
// more has arrived: what a connection looks like between two writes.
type oneShot struct {
	data  []byte
	reads int
}

var errNothingYet = errors.New("nothing more has arrived")

func (o *oneShot) Read(p []byte) (int, error) {
	o.reads++
	if len(o.data) == 0 {
		return 0, errNothingYet
	}
	n := copy(p, o.data)
	o.data = o.data[n:]
	return n, nil
}

// TestSSEReaderReady: ready is true exactly when a whole event with data
// is already in hand, so a batch of buffered events never waits for the
// connection.
func TestSSEReaderReady(t *testing.T) {
	cases := []struct {
		name, rest string
		ready      bool
	}{
		{"whole event", "data: b\n\n", true},
		{"crlf event", "data: b\r\n\r\n", true},
		{"bare data field", "data\n\n", true},
		{"two events", "data: b\n\ndata: c\n\n", true},
		{"nothing", "", false},
		{"half an event", "data: b\n", false},
		{"half a line", "data: b", false},
		{"comment only", ": keepalive\n\n", false},
		{"comment then half", ": keepalive\n\ndata: b\n", false},
		{"other field only", "event: x\n\n", false},
		{"field named like data", "datum: b\n\n", false},
		{"bare cr", "data: b\r\rdata: c\n\n", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := &oneShot{data: []byte("data: a\n\n" + tc.rest)}
			r := newSSEReader(src, 0)
			d, err := r.next()
			require.NoError(t, err)
			require.Equal(t, "a", string(d))
			require.Equal(t, tc.ready, r.ready())
			if tc.ready {
				reads := src.reads
				_, err := r.next()
				require.NoError(t, err)
				require.Equal(t, reads, src.reads, "a ready event is read from the buffer alone")
			}
		})
	}
}
