package state

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// streamCuts streams text in the given chunks the way a delta streamer
// does (hold what OpenSecretStart marks open, prepend it to the next
// chunk, send the rest at the end) and returns the pieces it sends.
func streamCuts(chunks []string) []string {
	var pieces []string
	held := ""
	for _, c := range chunks {
		s := held + c
		cut := OpenSecretStart(s)
		if cut > 0 {
			pieces = append(pieces, s[:cut])
		}
		held = s[cut:]
	}
	if held != "" {
		pieces = append(pieces, held)
	}
	return pieces
}

// requireNoMatchSplit checks that no match of the sanitiser in the whole
// text crosses a boundary between two pieces, and that sanitising the
// pieces one by one gives the whole text sanitised.
func requireNoMatchSplit(t *testing.T, chunks []string) {
	t.Helper()
	whole := strings.Join(chunks, "")
	pieces := streamCuts(chunks)
	require.Equal(t, whole, strings.Join(pieces, ""), "the pieces are the text")
	var cuts []int
	at := 0
	for _, p := range pieces[:max(len(pieces)-1, 0)] {
		at += len(p)
		cuts = append(cuts, at)
	}
	for _, m := range secretPattern.FindAllStringIndex(whole, -1) {
		for _, c := range cuts {
			if m[0] < c && c < m[1] {
				t.Fatalf("match %q of %q is split at %d: pieces %q", whole[m[0]:m[1]], whole, c, pieces)
			}
		}
	}
	var redacted strings.Builder
	for _, p := range pieces {
		redacted.WriteString(redactSecrets(p))
	}
	require.Equal(t, redactSecrets(whole), redacted.String(), "pieces %q", pieces)
}

// TestOpenSecretStartSplitsNoMatch: every credential shape the sanitiser
// knows, cut at every byte into two deltas (and streamed a byte at a
// time), never reaches the wire in two pieces.
func TestOpenSecretStartSplitsNoMatch(t *testing.T) {
	secrets := []string{
		"Authorization: Bearer abcdefgh12345678.xyz",
		"BEARER\t\tABCDEFGHIJ",
		"key sk-ant-abcdefghijklmnopqrstuvwxyz end",
		"sk-abcdefghijklmnop_qrst-uv",
		"token ghp_" + strings.Repeat("T", 36) + " done",
		"xghs_" + strings.Repeat("a1", 15),
		"github_pat_" + strings.Repeat("A_", 20) + ".",
		"AKIA" + strings.Repeat("Z9", 8) + "AKIAQ",
		"xoxb-1234567890-abcdefghij rest",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabcd\n-----END RSA PRIVATE KEY-----\nafter",
		"-----BEGIN PRIVATE KEY-----\nMIIE never closed",
		"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE----- and -----BEGIN EC PRIVATE KEY-----\nxyz",
		"no secret here at all, just ghost text and a task-list",
	}
	for _, s := range secrets {
		for cut := 0; cut <= len(s); cut++ {
			requireNoMatchSplit(t, []string{s[:cut], s[cut:]})
		}
		requireNoMatchSplit(t, strings.Split(s, ""))
	}
}

// TestOpenSecretStartSendsPlainText: text that cannot start a credential
// is never held.
func TestOpenSecretStartSendsPlainText(t *testing.T) {
	for _, s := range []string{"", "hello world. ", "a task-list: done\n", "ghost ", "AKIA" + strings.Repeat("Q", 16)} {
		require.Equal(t, len(s), OpenSecretStart(s), "%q", s)
	}
	require.Equal(t, 6, OpenSecretStart("hello ghp_abc"))
	require.Equal(t, 4, OpenSecretStart("see -----BEG"))
	require.Equal(t, 3, OpenSecretStart("my bearer"))
}
