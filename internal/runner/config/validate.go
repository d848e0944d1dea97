package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// validate applies the mode rules and cross-flag rules, then fills the
// derived fields. The steps run in this order because the first failing
// rule is the one reported (config_test.go pins which one wins), and later
// steps read fields earlier ones derive (the mode, the cleaned state dir).
func (p *parser) validate() (Config, error) {
	if p.buildMetadata {
		return p.validateBuildMetadata()
	}
	c := p.cfg
	for _, step := range []func(*Config) error{
		p.validateMode,
		p.validateIdentity,
		p.validateStateDir,
		p.validateTransport,
		p.validateOutbox,
		p.validateLifecycle,
		p.validateLogging,
		p.validateTimeouts,
		p.validateLocalPaths,
	} {
		if err := step(&c); err != nil {
			return Config{}, err
		}
	}
	p.collectIgnored(&c)
	return c, nil
}

// validateBuildMetadata accepts --build-metadata only on its own: it prints
// and exits, so any other flag would be silently dropped.
func (p *parser) validateBuildMetadata() (Config, error) {
	if len(p.order) != 1 {
		return Config{}, &usageError{Flag: "--build-metadata", Problem: "must be the only argument"}
	}
	return Config{Mode: ModeBuildMetadata}, nil
}

// validateMode picks dial or listen from which transport flags were given.
// With neither, a given fake-harness flag is reported before the generic
// no-mode error, because it says why that flag alone is not a mode.
func (p *parser) validateMode(c *Config) error {
	dial := p.changed("connect-url")
	listen := false
	for _, name := range listenFlags {
		listen = listen || p.changed(name)
	}
	switch {
	case dial && listen:
		return &usageError{Problem: "give either --connect-url or the --listen-* flags, not both"}
	case !dial && !listen:
		for _, name := range ignoredFlags {
			if p.changed(name) {
				return &usageError{Flag: "--" + name, Problem: "only accepted with --connect-url or --listen-path (the local fake-harness mode is not implemented)"}
			}
		}
		return &usageError{Problem: "no mode: give --connect-url (dial) or --listen-path (listen), or --build-metadata; see --help"}
	case dial:
		c.Mode = ModeDial
	default:
		c.Mode = ModeListen
	}
	return nil
}

// validateIdentity requires every identity flag, each bounded text. All
// missing flags are named in one error (led by the first), so one run
// shows what a launch lacks.
func (p *parser) validateIdentity(*Config) error {
	var missing []string
	for _, name := range identityFlags {
		if !p.changed(name) {
			missing = append(missing, "--"+name)
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		return &usageError{Flag: missing[0], Problem: "required"}
	default:
		return &usageError{Flag: missing[0], Problem: "required; so are " + strings.Join(missing[1:], ", ")}
	}
	for _, name := range identityFlags {
		f := p.fs.Lookup(name)
		if err := checkText(f.Value.String(), maxIdentityBytes); err != nil {
			return &usageError{Flag: "--" + name, Problem: err.Error()}
		}
	}
	return nil
}

// validateStateDir requires a usable absolute --state-dir and cleans it.
func (p *parser) validateStateDir(c *Config) error {
	if len(c.StateDir) > maxPathBytes || strings.ContainsRune(c.StateDir, 0) {
		return &usageError{Flag: "--state-dir", Problem: "not a usable path"}
	}
	if !filepath.IsAbs(c.StateDir) {
		// Agents' pcwrap sessions live under it and outlive this process: a
		// path that depends on the working directory could name another
		// directory for them or for the next runnerd.
		return &usageError{Flag: "--state-dir", Problem: fmt.Sprintf("must be an absolute path, got %s", quote.Text(c.StateDir))}
	}
	c.StateDir = filepath.Clean(c.StateDir)
	return nil
}

// validateTransport checks the chosen mode's flags, then --ca-bundle-path,
// which only a wss:// dial uses.
func (p *parser) validateTransport(c *Config) error {
	if c.Mode == ModeDial {
		if err := p.validateDial(c); err != nil {
			return err
		}
	} else {
		if err := p.validateListen(c); err != nil {
			return err
		}
	}
	if p.changed("ca-bundle-path") {
		if c.Mode != ModeDial || c.ConnectURL.Scheme != "wss" {
			return &usageError{Flag: "--ca-bundle-path", Problem: "accepted only with a wss:// --connect-url"}
		}
		if err := checkPath(c.CABundlePath); err != nil {
			return &usageError{Flag: "--ca-bundle-path", Problem: err.Error()}
		}
	}
	return nil
}

// validateOutbox keeps the P0 reserve inside the outbox budget.
func (p *parser) validateOutbox(c *Config) error {
	if c.P0ReserveBytes >= c.MaxOutboxBytes {
		return &usageError{Flag: "--p0-reserve-bytes", Problem: fmt.Sprintf("must be below --max-outbox-bytes (%d >= %d)", c.P0ReserveBytes, c.MaxOutboxBytes)}
	}
	return nil
}

// validateLifecycle derives the lifetime bound (--max-runtime-ms is its
// alias) and checks that --idle-timeout-ms goes with warm only.
func (p *parser) validateLifecycle(c *Config) error {
	c.MaxLifetime = p.maxLifetime
	if p.changed("max-runtime-ms") {
		if p.changed("max-lifetime-ms") && p.maxRuntime != p.maxLifetime {
			return &usageError{Flag: "--max-runtime-ms", Problem: "differs from --max-lifetime-ms (give one of them)"}
		}
		c.MaxLifetime = p.maxRuntime
	}
	if c.MaxLifetime >= maxServerDuration {
		c.MaxLifetime = 0 // a century or more is unlimited
	}

	switch Lifecycle(p.lifecycle) {
	case LifecyclePerTurn:
		if p.changed("idle-timeout-ms") {
			return &usageError{Flag: "--idle-timeout-ms", Problem: "not accepted with --lifecycle-mode per_turn"}
		}
	case LifecycleWarm:
		if !p.changed("idle-timeout-ms") {
			return &usageError{Flag: "--idle-timeout-ms", Problem: "required with --lifecycle-mode warm"}
		}
	default:
		return &usageError{Flag: "--lifecycle-mode", Problem: fmt.Sprintf("must be per_turn or warm, got %s", quote.Text(p.lifecycle))}
	}
	c.Lifecycle = Lifecycle(p.lifecycle)
	return nil
}

// validateLogging reads --log-format and --log-level.
func (p *parser) validateLogging(c *Config) error {
	switch LogFormat(p.logFormat) {
	case LogFormatJSON, LogFormatText:
		c.LogFormat = LogFormat(p.logFormat)
	default:
		return &usageError{Flag: "--log-format", Problem: fmt.Sprintf("must be json or text, got %s", quote.Text(p.logFormat))}
	}

	c.LogLevel = defaultLogLevel
	if p.changed("log-level") {
		lv, ok := parseLogLevel(p.logLevel)
		if !ok {
			return &usageError{Flag: "--log-level", Problem: fmt.Sprintf("must be debug, info, warn or error, got %s", quote.Text(p.logLevel))}
		}
		c.LogLevel = lv
	}
	return nil
}

// validateTimeouts checks the liveness pair and fills the per-agent cold
// session.open timeouts: the built-in long ones first, then the flags'.
func (p *parser) validateTimeouts(c *Config) error {
	if c.SilenceTimeout <= c.PingInterval {
		return &usageError{Flag: "--silence-timeout-ms", Problem: "must exceed --ping-interval-ms, or a quiet but live connection would look dead"}
	}

	c.ColdTimeoutByAgent = map[string]time.Duration{}
	for _, a := range defaultColdTimeoutAgents {
		c.ColdTimeoutByAgent[a] = defaultSessionOpenColdLong
	}
	for _, e := range p.coldAgents.entries {
		c.ColdTimeoutByAgent[e.agent] = e.timeout
	}
	c.MaxConcurrentColdStarts = int(p.coldStarts)
	return nil
}

// validateLocalPaths checks the optional local paths (diagnostics, pcwrap,
// opencode).
func (p *parser) validateLocalPaths(c *Config) error {
	for _, path := range []struct{ flag, value string }{{"--diagnostics-directory", c.DiagnosticsDir}, {"--pcwrap-path", c.PcwrapPath}, {"--opencode-executable", c.OpenCodeExecutable}} {
		if path.value == "" {
			continue
		}
		if err := checkPath(path.value); err != nil {
			return &usageError{Flag: path.flag, Problem: err.Error()}
		}
	}
	return nil
}

// collectIgnored lists, sorted, the accepted-but-ignored flags that were
// given, so the runner can warn about them.
func (p *parser) collectIgnored(c *Config) {
	for _, name := range ignoredFlags {
		if p.changed(name) {
			c.Ignored = append(c.Ignored, "--"+name)
		}
	}
	sort.Strings(c.Ignored)
}

// validateDial checks --connect-url's syntax (prp.md §1.3): ws:// or wss://;
// no userinfo, query, fragment, backslash, whitespace or control characters;
// no '%' in the authority; IPv6 bracketed; a non-zero port.
func (p *parser) validateDial(c *Config) error {
	bad := func(problem string) error {
		return &usageError{Code: CodeConnectURLInvalid, Flag: "--connect-url", Problem: problem}
	}
	raw := p.connectURL
	if len(raw) > maxConnectURLBytes {
		return bad("too long")
	}
	for _, r := range raw {
		if r == '\\' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return bad("must not contain whitespace, control characters or backslashes")
		}
	}
	if !utf8.ValidString(raw) {
		return bad("not valid UTF-8")
	}
	var scheme string
	switch {
	case strings.HasPrefix(raw, "ws://"):
		scheme = "ws"
	case strings.HasPrefix(raw, "wss://"):
		scheme = "wss"
	default:
		return bad("must start with ws:// or wss://")
	}
	rest := raw[len(scheme)+3:]
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if strings.ContainsAny(rest, "?#") {
		return bad("must not have a query or fragment")
	}
	if strings.Contains(authority, "@") {
		return bad("must not carry userinfo")
	}
	if strings.Contains(authority, "%") {
		return bad("must not percent-encode the host")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("not a URL")
	}
	host := u.Hostname()
	if host == "" {
		return bad("has no host")
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(authority, "[") {
		return bad("IPv6 hosts must be bracketed")
	}
	port := uint64(80)
	if scheme == "wss" {
		port = 443
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 {
			return bad("port must be 1-65535")
		}
		port = n
	} else if strings.HasSuffix(authority, ":") {
		return bad("empty port")
	}
	if scheme == "ws" {
		// Checked here, before any state exists, whenever the host alone
		// decides it; a name is resolved by the dialer, which refuses a
		// ws:// target unless every address is loopback (prp.md §1.3).
		if ip, err := netip.ParseAddr(host); err == nil && !ip.IsLoopback() {
			return bad("ws:// is only for loopback addresses (127.0.0.0/8, ::1); use wss:// for " + host)
		}
	}
	c.ConnectURL, c.DialHost, c.DialPort = u, host, uint16(port)
	return nil
}

// validateListen checks the listener flags (prp.md §1.2). Path problems carry
// runner_ingress_bind_conflict, the code the server looks for.
func (p *parser) validateListen(c *Config) error {
	addr, err := netip.ParseAddr(p.listenAddress)
	if err != nil || addr.Zone() != "" {
		return &usageError{Code: CodeIngressBindConflict, Flag: "--listen-address", Problem: fmt.Sprintf("must be an IP address, got %s", quote.Text(p.listenAddress))}
	}
	c.ListenAddress, c.ListenPort = addr, uint16(p.listenPort)
	if !p.changed("listen-path") {
		return &usageError{Code: CodeIngressBindConflict, Flag: "--listen-path", Problem: "required in listen mode"}
	}
	if err := validateListenPath(c.ListenPath, c.Identity.RunID); err != nil {
		return &usageError{Code: CodeIngressBindConflict, Flag: "--listen-path", Problem: err.Error()}
	}
	if c.ListenAddress.String() != defaultListenAddress || c.ListenPort != defaultListenPort {
		c.Warnings = append(c.Warnings, fmt.Sprintf("listening on %s instead of %s:%d: the reference server's ingress reaches only the default",
			netip.AddrPortFrom(c.ListenAddress, c.ListenPort), defaultListenAddress, defaultListenPort))
	}
	return nil
}

// validateListenPath checks that path is exactly listenPathPrefix+runID and
// that runID is a plain path segment: non-empty, no '/', '?', '#', '\', '%',
// whitespace or control characters (prp.md §1.2, scenario 3). A warm
// run.attach's new path meets the same rule in prp.ValidateListenPath.
func validateListenPath(path, runID string) error {
	if err := validateRunIDSegment(runID); err != nil {
		return err
	}
	if path != listenPathPrefix+runID {
		return fmt.Errorf("must be exactly %s<run-id> for --run-id", listenPathPrefix)
	}
	return nil
}

// validateRunIDSegment checks that runID can be the last segment of the
// listener path.
func validateRunIDSegment(runID string) error {
	if runID == "" {
		return errors.New("run id is empty")
	}
	for _, r := range runID {
		if r == '/' || r == '?' || r == '#' || r == '\\' || r == '%' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return errors.New("run id must be one path segment without '/', '?', '#', '\\', '%', whitespace or control characters")
		}
	}
	if !utf8.ValidString(runID) {
		return errors.New("run id is not valid UTF-8")
	}
	return nil
}

// parseLogLevel reads a --log-level name (exact, lower-case, as documented).
func parseLogLevel(s string) (slog.Level, bool) {
	for _, l := range logLevels {
		if l.name == s {
			return l.level, true
		}
	}
	return 0, false
}

// checkText accepts non-empty UTF-8 without control characters, at most
// limit bytes.
func checkText(s string, limit int) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > limit:
		return fmt.Errorf("longer than %d bytes", limit)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return errors.New("must not contain control characters")
		}
	}
	return nil
}

func checkPath(s string) error {
	if s == "" || len(s) > maxPathBytes || strings.ContainsRune(s, 0) {
		return errors.New("not a usable path")
	}
	return nil
}
