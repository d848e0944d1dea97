package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	c, err := parseConfig([]string{"serve", "--hostname", "127.0.0.1", "--port", "0"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, config{host: "127.0.0.1", port: 0, idle: defaultIdle}, c)
	c, err = parseConfig([]string{"serve", "--port=4096", "--hostname=::1", "--idle=1s"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, config{host: "::1", port: 4096, idle: time.Second}, c)
	for _, bad := range [][]string{
		nil, {"run"}, {"serve", "--hostname", "0.0.0.0"}, {"serve", "--port", "70000"},
		{"serve", "extra"}, {"serve", "--idle", "0s"},
	} {
		_, err := parseConfig(bad, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

func TestDirective(t *testing.T) {
	require.Equal(t, []string{"text", "a", "b"}, directive("context\nFAKEOC: text a b\nmore"))
	require.Nil(t, directive("no directive"))
}
