package prp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"
)

// Dial bounds (prp.md §1.3, §12).
const (
	// connectAttemptTimeout bounds one TCP connect to one pinned address.
	connectAttemptTimeout = 3 * time.Second
	// connectTotalTimeout bounds one connect over all pinned addresses.
	connectTotalTimeout = 10 * time.Second
	// maxCABundleBytes bounds --ca-bundle-path (prp.md §1.3).
	maxCABundleBytes = 4 << 20
	// maxUpgradeHeaderBytes bounds upgrade headers (prp.md §1.4).
	maxUpgradeHeaderBytes = 16 << 10
)

// ErrNonLoopback reports a ws:// target with a resolved address that is not loopback.
var ErrNonLoopback = errors.New("plain ws:// requires every resolved address to be loopback")

// errConnectFailed reports that every pinned address failed.
var errConnectFailed = errors.New("connect failed")

// errCABundle reports a CA bundle that breaks the rules of prp.md §1.3.
var errCABundle = errors.New("invalid ca bundle")

// Resolver looks up a host once; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// resolve resolves t's host once and returns the sorted, deduplicated
// addresses to pin for every later connect. For ws:// every address MUST be
// loopback (prp.md §1.3).
func resolve(ctx context.Context, r Resolver, t DialTarget) ([]netip.AddrPort, error) {
	var ips []netip.Addr
	if a, err := netip.ParseAddr(t.Host); err == nil {
		ips = []netip.Addr{a}
	} else {
		if r == nil {
			r = net.DefaultResolver
		}
		ips, err = r.LookupNetIP(ctx, "ip", t.Host)
		if err != nil {
			return nil, fmt.Errorf("resolve host: %w", err)
		}
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, a := range ips {
		a = a.Unmap().WithZone("")
		if !t.Secure && !a.IsLoopback() {
			return nil, fmt.Errorf("resolve host: %w", ErrNonLoopback)
		}
		out = append(out, netip.AddrPortFrom(a, t.Port))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("resolve host: no addresses")
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// pinnedDialer connects to the pinned addresses in order, each attempt bounded
// by perAttempt and all of them by total and the caller's deadline.
type pinnedDialer struct {
	addrs      []netip.AddrPort
	perAttempt time.Duration
	total      time.Duration
}

// DialContext ignores addr: the target was resolved once and pinned.
func (d pinnedDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.total)
	defer cancel()
	var last error
	tried := 0
	for _, ap := range d.addrs {
		if ctx.Err() != nil {
			break
		}
		tried++
		actx, acancel := context.WithTimeout(ctx, d.perAttempt)
		var nd net.Dialer
		c, err := nd.DialContext(actx, "tcp", ap.String())
		acancel()
		if err == nil {
			return c, nil
		}
		last = err
	}
	if last == nil {
		last = ctx.Err()
	}
	return nil, fmt.Errorf("connect: %d/%d pinned address attempts failed: %w: %w", tried, len(d.addrs), errConnectFailed, last)
}

// Dialer opens WebSocket connections to one validated, resolved and pinned
// target (dial modes, prp.md §1.3). Safe for concurrent use.
type Dialer struct {
	target DialTarget
	addrs  []netip.AddrPort
	client *http.Client
}

// DialerConfig configures NewDialer.
type DialerConfig struct {
	URL          string
	CABundlePath string   // optional; wss:// only
	Resolver     Resolver // nil: net.DefaultResolver
	// AttemptTimeout and TotalTimeout default to connectAttemptTimeout and connectTotalTimeout.
	AttemptTimeout, TotalTimeout time.Duration
	// Transport, when set, carries the upgrade instead of TCP to the pinned
	// addresses: tests pass an in-memory pipe so they run in testing/synctest.
	Transport http.RoundTripper
}

// NewDialer validates the URL, loads the CA bundle and resolves the host once.
func NewDialer(ctx context.Context, cfg DialerConfig) (*Dialer, error) {
	t, err := parseDialURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.CABundlePath != "" && !t.Secure {
		return nil, fmt.Errorf("new dialer: ca bundle only with wss://: %w", errCABundle)
	}
	var tlsConf *tls.Config
	if t.Secure {
		roots, err := x509.SystemCertPool()
		if err != nil || roots == nil {
			roots = x509.NewCertPool()
		}
		if cfg.CABundlePath != "" {
			pem, err := readCABundle(cfg.CABundlePath)
			if err != nil {
				return nil, err
			}
			if !roots.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("new dialer: no certificates in bundle: %w", errCABundle)
			}
		}
		tlsConf = &tls.Config{RootCAs: roots, ServerName: t.Host, MinVersion: tls.VersionTLS12}
	}
	addrs, err := resolve(ctx, cfg.Resolver, t)
	if err != nil {
		return nil, err
	}
	pd := pinnedDialer{addrs: addrs, perAttempt: cfg.AttemptTimeout, total: cfg.TotalTimeout}
	if pd.perAttempt <= 0 {
		pd.perAttempt = connectAttemptTimeout
	}
	if pd.total <= 0 {
		pd.total = connectTotalTimeout
	}
	var tr http.RoundTripper = &http.Transport{
		Proxy:                  nil, // pinned addresses only; never an environment proxy
		DialContext:            pd.DialContext,
		TLSClientConfig:        tlsConf,
		TLSHandshakeTimeout:    pd.total,
		MaxResponseHeaderBytes: maxUpgradeHeaderBytes,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
	}
	if cfg.Transport != nil {
		tr = cfg.Transport
	}
	return &Dialer{
		target: t,
		addrs:  addrs,
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// Target returns the validated target.
func (d *Dialer) Target() DialTarget { return d.target }

// Addrs returns the pinned addresses in connect order.
func (d *Dialer) Addrs() []netip.AddrPort { return slices.Clone(d.addrs) }

// dial opens one WebSocket (no subprotocol, no compression); act records inbound activity.
func (d *Dialer) dial(ctx context.Context, act *activity, maxFrameBytes int) (*wsConn, error) {
	opts := dialOptions(act)
	opts.HTTPClient = d.client
	c, resp, err := websocket.Dial(ctx, d.target.URL(), opts)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("dial websocket: %w", err)
	}
	return newWSConn(c, act, maxFrameBytes), nil
}

// CloseIdle releases transport resources.
func (d *Dialer) CloseIdle() { d.client.CloseIdleConnections() }

// readCABundle reads a private regular file of at most maxCABundleBytes,
// without following a symlink and from the same descriptor it checked.
func readCABundle(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open ca bundle: %w: %w", errCABundle, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat ca bundle: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read ca bundle: not a regular file: %w", errCABundle)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("read ca bundle: writable by group or others: %w", errCABundle)
	}
	if st.Size() > maxCABundleBytes {
		return nil, fmt.Errorf("read ca bundle: larger than %d bytes: %w", maxCABundleBytes, errCABundle)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCABundleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read ca bundle: %w", err)
	}
	if len(b) > maxCABundleBytes {
		return nil, fmt.Errorf("read ca bundle: larger than %d bytes: %w", maxCABundleBytes, errCABundle)
	}
	return b, nil
}
