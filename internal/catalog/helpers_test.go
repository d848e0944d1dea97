package catalog

import (
	"crypto/sha256"
	"encoding/hex"
)

func sha256Text(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}
