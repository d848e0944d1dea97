package prp

import (
	"net/http"
	"strings"
)

// headerHasToken reports whether a comma-separated header lists token (case-insensitive).
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
