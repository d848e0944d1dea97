package prp

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// connectPathPrefix is the route the Paperclip server serves and the runner's
// listener accepts: the exact path is connectPathPrefix + runId (S-ws, R-transport).
const connectPathPrefix = "/api/runner/v1/connect/"

// Default ports when a dial URL has none (RFC 6455 §3).
const (
	defaultWSPort  = 80
	defaultWSSPort = 443
)

// errInvalidURL reports a dial URL that breaks the rules of prp.md §1.3.
var errInvalidURL = errors.New("invalid dial url")

// errInvalidListenPath reports a listener path that breaks the rules of prp.md §1.2.
var errInvalidListenPath = errors.New("invalid listen path")

// DialTarget is a validated dial URL (prp.md §1.3). Host carries no brackets.
type DialTarget struct {
	Secure bool   // wss://
	Host   string // DNS name or IP literal (IPv6 without brackets)
	Port   uint16 // never 0
	Path   string // starts with "/"
}

// URL returns the canonical ws:// or wss:// form of t.
func (t DialTarget) URL() string {
	scheme := "ws"
	if t.Secure {
		scheme = "wss"
	}
	return scheme + "://" + t.hostPort() + t.Path
}

// hostPort returns host:port with IPv6 literals bracketed.
func (t DialTarget) hostPort() string {
	h := t.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(int(t.Port))
}

// parseDialURL validates raw per prp.md §1.3: it MUST start ws:// or wss://
// and carry no query, fragment, backslash, whitespace, control character,
// userinfo or '%' in the authority; IPv6 literals are bracketed; the port is
// non-zero. Whether a ws:// host is loopback is decided after resolution
// (resolve). Errors wrap errInvalidURL and never echo the URL.
func parseDialURL(raw string) (DialTarget, error) {
	var t DialTarget
	for _, r := range raw {
		switch {
		case badRune(r):
			return t, fmt.Errorf("parse dial url: whitespace or control character: %w", errInvalidURL)
		case r == '\\':
			return t, fmt.Errorf("parse dial url: backslash: %w", errInvalidURL)
		case r == '?':
			return t, fmt.Errorf("parse dial url: query: %w", errInvalidURL)
		case r == '#':
			return t, fmt.Errorf("parse dial url: fragment: %w", errInvalidURL)
		}
	}
	var rest string
	switch {
	case strings.HasPrefix(raw, "ws://"):
		rest = raw[len("ws://"):]
		t.Port = defaultWSPort
	case strings.HasPrefix(raw, "wss://"):
		rest = raw[len("wss://"):]
		t.Secure, t.Port = true, defaultWSSPort
	default:
		return t, fmt.Errorf("parse dial url: scheme must be ws:// or wss://: %w", errInvalidURL)
	}
	authority, path := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	t.Path = path
	if strings.ContainsAny(authority, "@%") {
		return t, fmt.Errorf("parse dial url: userinfo or percent-encoding in authority: %w", errInvalidURL)
	}
	host, port := authority, ""
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return t, fmt.Errorf("parse dial url: unterminated IPv6 literal: %w", errInvalidURL)
		}
		host = authority[1:end]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return t, fmt.Errorf("parse dial url: bad IPv6 literal: %w", errInvalidURL)
		}
		after := authority[end+1:]
		if after != "" {
			if after[0] != ':' {
				return t, fmt.Errorf("parse dial url: junk after IPv6 literal: %w", errInvalidURL)
			}
			port = after[1:]
			if port == "" {
				return t, fmt.Errorf("parse dial url: empty port: %w", errInvalidURL)
			}
		}
	} else {
		if i := strings.IndexByte(authority, ':'); i >= 0 {
			host, port = authority[:i], authority[i+1:]
			if port == "" {
				return t, fmt.Errorf("parse dial url: empty port: %w", errInvalidURL)
			}
		}
		if !validHostname(host) {
			return t, fmt.Errorf("parse dial url: bad host (IPv6 must be bracketed): %w", errInvalidURL)
		}
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 || strings.TrimLeft(port, "0123456789") != "" {
			return t, fmt.Errorf("parse dial url: port must be 1-65535: %w", errInvalidURL)
		}
		t.Port = uint16(n)
	}
	t.Host = strings.ToLower(host)
	return t, nil
}

// validHostname accepts a DNS name or an IPv4 literal: letters, digits, '-',
// '.', '_' in non-empty labels.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// badRune reports whitespace, control characters, invalid UTF-8 and the BOM.
func badRune(r rune) bool {
	return r == ' ' || unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError || r == 0xfeff
}

// ConnectPath returns the exact connect path for runID.
func ConnectPath(runID string) string { return connectPathPrefix + runID }

// ValidateListenPath checks a listener path per prp.md §1.2 and returns its
// run id: the path is connectPathPrefix + a non-empty, slash-free run id, with
// no '?', '#', '\', '%', control character or whitespace.
func ValidateListenPath(path string) (runID string, err error) {
	for _, r := range path {
		if badRune(r) {
			return "", fmt.Errorf("validate listen path: whitespace or control character: %w", errInvalidListenPath)
		}
		if strings.ContainsRune("?#\\%", r) {
			return "", fmt.Errorf("validate listen path: forbidden character: %w", errInvalidListenPath)
		}
	}
	id, ok := strings.CutPrefix(path, connectPathPrefix)
	if !ok {
		return "", fmt.Errorf("validate listen path: must start %s: %w", connectPathPrefix, errInvalidListenPath)
	}
	if id == "" || strings.Contains(id, "/") {
		return "", fmt.Errorf("validate listen path: run id must be one non-empty segment: %w", errInvalidListenPath)
	}
	return id, nil
}
