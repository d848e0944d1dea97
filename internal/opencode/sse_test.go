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
