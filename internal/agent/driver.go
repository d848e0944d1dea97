package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/clock"
	"github.com/pcrunner/pcrunner/internal/mcpbridge"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

// driverLocked returns the driver of the bound provider: the
// registration of Binding.Driver, ACP's before a binding. m.mu held.
func (m *Manager) driverLocked() provider.Driver {
	if m.drv != nil && m.drvCl == m.cl {
		return m.drv
	}
	name := ""
	if b := m.st.Binding; b != nil && m.cl != nil {
		name = b.Driver
	}
	m.drv, m.drvCl = m.newDriver(name), m.cl
	return m.drv
}

// newDriver makes the driver recorded as name, ACP's for a name no
// registration has.
func (m *Manager) newDriver(name string) provider.Driver {
	reg, _ := m.registration(name)
	return reg.New(host{m})
}

// registration is the provider recorded as name, or the one recorded
// under the empty name (ACP's) and false.
func (m *Manager) registration(name string) (provider.Registration, bool) {
	if reg, ok := registrationOf(m.cfg.Drivers, func(r provider.Registration) bool { return r.Driver == name }); ok {
		return reg, true
	}
	reg, _ := registrationOf(m.cfg.Drivers, func(r provider.Registration) bool { return r.Driver == "" })
	return reg, false
}

// registrationOf is the first of regs that match.
func registrationOf(regs []provider.Registration, match func(provider.Registration) bool) (provider.Registration, bool) {
	for _, r := range regs {
		if match(r) {
			return r, true
		}
	}
	return provider.Registration{}, false
}

// host is the Manager as its drivers see it (provider.Host, acpx.Host):
// the methods provider.Host marks "lock held" assume m.mu is held; the
// others take it.
type host struct{ m *Manager }

func (h host) Core() *provider.Core { return h.m.cl.Core }
func (h host) Logger() *slog.Logger { return h.m.log }

func (h host) Mapper() provider.Mapper { return h.m.mapper }
func (h host) Clock() clock.Clock      { return h.m.cfg.Clock }

func (h host) Binding() (provider.Binding, bool) {
	m := h.m
	b := m.st.Binding
	if b == nil {
		return provider.Binding{}, false
	}
	return provider.Binding{Model: b.Model, PermissionMode: b.PermissionMode,
		Instructions: func() (*string, error) { return readInstructions(m.cfg.StateDir, b) }}, true
}

func (h host) WithLock(fn func()) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	fn()
}

func (h host) ProcessEnded() <-chan struct{} {
	h.m.mu.Lock()
	p := h.m.proc
	h.m.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.ended
}

func (h host) Go(fn func(ctx context.Context)) {
	m := h.m
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn(m.ctx)
	}()
}

func (h host) AfterCommit(fn func(ctx context.Context)) {
	h.m.afterCommit = append(h.m.afterCommit, fn) // the next batch starts it once durable
}

func (h host) Deliver(d provider.Driver, record func(), in []provider.Inbound) error {
	m := h.m
	// The agent reader's two waits (deliver): room in the commit queue,
	// then prp.md §8.5's flow control. While they hold, the provider's
	// stream waits unread and its next delivery takes all that arrived.
	// At the supervisor's end nothing is committed: the provider keeps
	// what it said, and a restart recovers it from there.
	if m.commits.awaitRoom(m.ctx) != nil || m.awaitDrained(m.ctx) != nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	if p == nil || m.cl == nil || m.driverLocked() != d {
		return nil
	}
	record()
	var evs []provider.Event
	var lines [][]byte
	var wakes []func()
	for _, x := range in {
		if x.Kind == provider.KindTurnSettled {
			m.cl.Wire().Turn = nil
		}
		e, l, w, op := m.handleInbound(p, x)
		if op != nil {
			var ok bool
			if l, ok = m.runClientOpLocked(p, op); !ok {
				return nil
			}
		}
		evs, lines = append(evs, e...), append(lines, l...)
		if w != nil {
			wakes = append(wakes, w)
		}
	}
	if t, _ := m.endingTurnLocked(evs); t != nil {
		// The turn ended: its events are parked while the workspace is
		// walked (a commit meanwhile takes none of them).
		return m.walkEndingTurnLocked(p, t, m.parkLocked(evs, lines, wakes))
	}
	for _, w := range wakes {
		m.wakeAfterCommitLocked(w)
	}
	return m.commitThenWriteLocked(evs, lines)
}

func (h host) CommitLocked(evs []provider.Event, lines [][]byte) error {
	return h.m.commitThenWriteLocked(evs, lines)
}

func (h host) Catalog() *catalog.Catalog       { return h.m.tools.cat }
func (h host) ThreadCatalogDigest() string     { return h.m.st.ThreadCatalogDigest }
func (h host) SetThreadCatalogDigest(d string) { h.m.st.ThreadCatalogDigest = d }
func (h host) ToolWaiting(callID string) bool  { _, busy := h.m.tools.waiters[callID]; return busy }

func (h host) AdmitCall(call mcpbridge.Call) (provider.ToolWait, mcpbridge.Result) {
	w, res := h.m.admitCallLocked(call)
	if w == nil {
		return nil, res // an untyped nil: the call is answered at once
	}
	return w, res
}

func (h host) RearmCall(callID string) (provider.ToolWait, *mcpbridge.Result) {
	m := h.m
	tb := m.tableLocked()
	c := tb.Find(callID)
	switch {
	case c == nil:
		return nil, nil
	case c.Recorded != nil:
		o := *c.Recorded
		res := m.answerLocked(c, o)
		tb.Settle(c.CallID, o)
		return nil, &res
	}
	c.State = toolcall.Pending
	return m.waitLocked(c.CallID), nil
}

func (h host) AwaitCall(tw provider.ToolWait, answer func(res mcpbridge.Result) ([]byte, error)) {
	m := h.m
	w := tw.(*toolWaiter)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		select {
		case a := <-w.ch:
			m.mu.Lock()
			defer m.mu.Unlock()
			line, err := answer(a.res)
			if err != nil {
				if a.taken != nil { // the provider withdrew the request: keep the result for a re-call
					m.tableLocked().Restore(a.call, *a.taken)
					_ = m.commitThenWriteLocked(nil, nil)
				}
				return
			}
			if err := m.commitThenWriteLocked(nil, [][]byte{line}); err != nil && !errors.Is(err, provider.ErrWrite) {
				m.log.Error("answer codex tool call", "err", err)
			}
		case <-m.ctx.Done():
		}
	}()
}

func (h host) Client() *acpx.Client { return h.m.cl }

func (h host) MCPServers(caps provider.AgentCapabilities) []acpx.MCPServer {
	return h.m.mcpServersLocked(caps)
}

// openCall is provider.OpenSession.Call over m.call.
func (m *Manager) openCall(ctx context.Context, deadline <-chan time.Time) func(mk func() (provider.Call, error)) (provider.Inbound, error) {
	return func(mk func() (provider.Call, error)) (provider.Inbound, error) {
		return m.call(ctx, deadline, func(*acpx.Client) (provider.Call, error) { return mk() })
	}
}
