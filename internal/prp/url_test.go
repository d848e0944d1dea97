package prp

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPRP01_DialURLParsing ports prp.md §15 scenario 1
// (url_resolution_rejects_non_loopback_and_ambiguous_inputs).
func TestPRP01_DialURLParsing(t *testing.T) {
	good := []struct {
		raw  string
		want DialTarget
	}{
		{"wss://host/path", DialTarget{Secure: true, Host: "host", Port: 443, Path: "/path"}},
		{"ws://127.0.0.1:8080/api/runner/v1/connect/r", DialTarget{Host: "127.0.0.1", Port: 8080, Path: "/api/runner/v1/connect/r"}},
		{"ws://[::1]:9/x", DialTarget{Host: "::1", Port: 9, Path: "/x"}},
		{"ws://localhost", DialTarget{Host: "localhost", Port: 80, Path: "/"}},
		{"wss://Example.COM:443/a/b", DialTarget{Secure: true, Host: "example.com", Port: 443, Path: "/a/b"}},
	}
	for _, c := range good {
		got, err := parseDialURL(c.raw)
		require.NoError(t, err, c.raw)
		require.Equal(t, c.want, got, c.raw)
	}
	bad := []string{
		"https://host/path", "http://127.0.0.1/", "WS://127.0.0.1/", "ws:/127.0.0.1/",
		"ws://user@127.0.0.1/", "ws://user:pw@127.0.0.1/",
		"ws://127.0.0.1/p?x=1", "ws://127.0.0.1/p#f", "ws://127.0.0.1/p\\q",
		"ws://127.0.0.1/p q", "ws://127.0.0.1/p\tq", "ws://127.0.0.1/p\x00", "ws://127.0.0.1/p\u00a0",
		"ws://127.0.0.1:0/", "ws://127.0.0.1:65536/", "ws://127.0.0.1:/", "ws://127.0.0.1:+1/",
		"ws://::1/", "ws://[::1/", "ws://[::1]x/", "ws://[fe80::1%25eth0]/", "ws://[127.0.0.1]/",
		"ws://ho%73t/", "ws:///path", "ws://", "", "wss://a..b/",
	}
	for _, raw := range bad {
		_, err := parseDialURL(raw)
		require.ErrorIs(t, err, errInvalidURL, "%q", raw)
		if len(raw) > 10 {
			require.NotContains(t, err.Error(), raw[6:], "errors never echo the URL")
		}
	}

	// ws:// to a non-loopback address is refused after resolution; wss:// is not.
	ctx := context.Background()
	tg, err := parseDialURL("ws://10.0.0.1/x")
	require.NoError(t, err)
	_, err = resolve(ctx, nil, tg)
	require.ErrorIs(t, err, ErrNonLoopback)
	tg, err = parseDialURL("ws://mixed.test/x")
	require.NoError(t, err)
	_, err = resolve(ctx, fakeResolver{"mixed.test": {"127.0.0.1", "192.0.2.1"}}, tg)
	require.ErrorIs(t, err, ErrNonLoopback)
	tg, err = parseDialURL("wss://public.test/x")
	require.NoError(t, err)
	addrs, err := resolve(ctx, fakeResolver{"public.test": {"192.0.2.9", "::ffff:192.0.2.1", "192.0.2.9", "2001:db8::1"}}, tg)
	require.NoError(t, err)
	require.Equal(t, []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:443"),
		netip.MustParseAddrPort("192.0.2.9:443"),
		netip.MustParseAddrPort("[2001:db8::1]:443"),
	}, addrs, "sorted, unmapped, deduplicated")
}

type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ss, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// TestPRP03_ListenerPath ports prp.md §15 scenario 3.
func TestPRP03_ListenerPath(t *testing.T) {
	id, err := ValidateListenPath("/api/runner/v1/connect/run_1")
	require.NoError(t, err)
	require.Equal(t, "run_1", id)
	for _, p := range []string{
		"/api/runner/v1/connect/", "/api/runner/v1/connect/run_1/extra", "/api/runner/v1/connect/run_1?x=1",
		"/api/runner/v1/connect/run%5F1", "/api/runner/v1/connect/run_1#f", "/api/runner/v1/connect/run\\1",
		"/api/runner/v1/connect/run 1", "/api/runner/v1/connect/run\n1", "/api/runner/v2/connect/run_1",
		"api/runner/v1/connect/run_1", "", "/api/runner/v1/connect//x",
	} {
		_, err := ValidateListenPath(p)
		require.ErrorIs(t, err, errInvalidListenPath, "%q", p)
	}
}

func FuzzParseDialURL(f *testing.F) {
	for _, s := range []string{"wss://host/path", "ws://127.0.0.1:1/x", "ws://[::1]:9/", "ws://u@h/", "ws://h/?q", "wss://h:0/",
		"ws://0/@", // '@' in the path is fine; the oracle once rejected it anywhere
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		tg, err := parseDialURL(raw)
		if err != nil {
			require.ErrorIs(t, err, errInvalidURL)
			return
		}
		require.NotZero(t, tg.Port)
		require.True(t, strings.HasPrefix(tg.Path, "/"))
		require.False(t, strings.ContainsAny(raw, "?#\\ "))
		// Userinfo and percent-encoding are refused in the authority only
		// (prp.md §1.3); the path may hold either.
		rest := strings.TrimPrefix(strings.TrimPrefix(raw, "wss://"), "ws://")
		authority, _, _ := strings.Cut(rest, "/")
		require.False(t, strings.ContainsAny(authority, "@%"), "authority %q", authority)
		// The canonical form re-parses to the same target.
		again, err := parseDialURL(tg.URL())
		require.NoError(t, err)
		require.Equal(t, tg, again)
	})
}

func FuzzValidateListenPath(f *testing.F) {
	for _, s := range []string{"/api/runner/v1/connect/run_1", "/api/runner/v1/connect/", "/api/runner/v1/connect/a/b", "/api/runner/v1/connect/a%20"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		id, err := ValidateListenPath(p)
		if err != nil {
			require.ErrorIs(t, err, errInvalidListenPath)
			return
		}
		require.NotEmpty(t, id)
		require.Equal(t, p, ConnectPath(id))
		require.False(t, strings.ContainsAny(id, "/?#\\% \t\r\n"))
	})
}
