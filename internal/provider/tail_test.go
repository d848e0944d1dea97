package provider

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStderrTailBoundedAndRedacted(t *testing.T) {
	tail := &StderrTail{Redactor: NewRedactor(testSecret)}
	for i := 0; i < 100; i++ {
		fmt.Fprintf(tail, "line %d\n", i)
	}
	lines := strings.Split(tail.String(), "\n")
	require.Len(t, lines, stderrTailLines)
	require.Equal(t, "line 99", lines[len(lines)-1])

	half := len(testSecret) / 2
	_, _ = tail.Write([]byte("token=" + testSecret[:half]))
	_, _ = tail.Write([]byte(testSecret[half:] + "\n"))
	require.NotContains(t, tail.String(), testSecret)
	require.Contains(t, tail.String(), "token="+redacted)

	_, _ = tail.Write(bytes.Repeat([]byte("x"), 3*stderrTailBytes))
	require.LessOrEqual(t, len(tail.String()), stderrTailBytes+stderrTailLines)
}
