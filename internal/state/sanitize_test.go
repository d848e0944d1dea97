package state

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// mayHoldSecretCases: one secret per alternative of secretPattern, in
// text and alone, and text that holds none.
var mayHoldSecretCases = []string{
	"Authorization: Bearer abcdefgh12345678", "BEARER\tabcdefgh12345678", "bEaReR abcdefgh12345678",
	"key sk-ant-abcdefghijklmnop1234", "sk-abcdefghijklmnop1234",
	"ghp_abcdefghijklmnopqrst1234", "x gho_abcdefghijklmnopqrst1234 y", "ghu_", "gh", "ghghs_abcdefghijklmnopqrst1234",
	"github_pat_abcdefghijklmnopqrst_1234", "AKIAABCDEFGHIJKLMNOP", "xoxb-1234567890abc",
	"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
	"the quick brown fox jumps over the lazy dog", "", "1796141752881678941;",
}

func TestMayHoldSecretCoversThePattern(t *testing.T) {
	for _, s := range mayHoldSecretCases {
		if secretPattern.MatchString(s) {
			require.True(t, mayHoldSecret(s), "%q holds a secret", s)
		}
		require.Equal(t, secretPattern.ReplaceAllString(s, Redacted), redactSecrets(s), "%q", s)
	}
	require.False(t, mayHoldSecret("the quick brown fox jumps over the lazy dog"))
}
