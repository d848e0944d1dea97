package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlags(t *testing.T) {
	o, code, ok := parseFlags([]string{"--session-dir", "/d", "--output=stdout", "--", "cat", "-n"}, io.Discard, io.Discard)
	require.True(t, ok, code)
	assert.Equal(t, options{sessionDir: "/d", output: "stdout", command: []string{"cat", "-n"}}, o)
	_, code, ok = parseFlags([]string{"-h"}, io.Discard, io.Discard)
	assert.False(t, ok)
	assert.Equal(t, 0, code)
	_, code, ok = parseFlags([]string{"--nope"}, io.Discard, io.Discard)
	assert.False(t, ok)
	assert.Equal(t, exitUsage, code)
}
