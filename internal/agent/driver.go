package agent

import (
	"context"
	"errors"
	"time"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// Driver is the wire protocol of one provider session: the only part of
// the Manager that depends on whether the agent speaks ACP, Codex's
// app-server protocol or another one. Everything else is shared by every
// driver: pcwrap supervision and hot restart, the durable record (the
// acpx.Record with its request table and mapping state), the one commit
// path, the cold-start gate and bounds, loss detection, runtime requests
// and the semantic tool flow.
//
// A driver keeps its durable state in the Manager's *acpx.Client (its
// Record, request table and active turn: acpx.Client.Wire), so a restart
// resumes it with the record. It turns the provider's stdout into the
// acpx.Inbound model the Manager consumes (responses, requests, session
// updates mapped by acpx.Mapper, settled turns, and acpx.KindEvents for
// events only that protocol has). Its methods run with the Manager's
// mutex held, except Open.
type Driver interface {
	// Open runs the handshake of a freshly launched process (the
	// initialize exchange and the session call) through o.Call.
	Open(ctx context.Context, o OpenSession) error
	// Feed decodes provider stdout bytes into messages, in order.
	Feed(p []byte) ([]provider.Inbound, error)
	// Prompt encodes the request that starts turn turnID with text and
	// marks the turn active.
	Prompt(turnID, text string) (provider.Call, error)
	// Cancel returns the lines that interrupt the active turn.
	Cancel() ([][]byte, error)
	// KeepsRunning reports whether an interrupted turn leaves the
	// provider process and its session running (Codex: codex.md §3);
	// false stops the agent after every cancel (ACP: acp.md §4.4).
	KeepsRunning() bool
	// HandleRequest answers a provider request before the Manager's
	// shared handling (ACP permissions, client fs, -32601); handled is
	// false to leave it to that handling.
	HandleRequest(in provider.Inbound) (evs []provider.Event, lines [][]byte, handled bool)
}

// OpenSession is what Driver.Open gets.
type OpenSession struct {
	Binding *Binding
	Resume  bool
	// Call writes the request mk encodes (after the commit that covers
	// it) and waits for its answer, the agent's end or the open bound.
	Call func(mk func() (provider.Call, error)) (provider.Inbound, error)
}

// Driver names of Binding.Driver.
const (
	DriverACP   = ""                 // acp.md: the acpx agents
	DriverCodex = "codex_app_server" // codex.md: codex app-server
	// DriverOpenCode is OpenCode's HTTP + SSE server (codex.md §6).
	DriverOpenCode = "opencode_server"
)

// driverLocked returns the driver of the bound provider. m.mu held.
func (m *Manager) driverLocked() Driver {
	if m.drv != nil && m.drvCl == m.cl {
		return m.drv
	}
	m.drv, m.drvCl = acpDriver{m}, m.cl
	if b := m.st.Binding; b != nil && m.cl != nil {
		if f, ok := drivers[b.Driver]; ok {
			m.drv = f(m)
		}
	}
	return m.drv
}

// drivers are the non-ACP drivers by Binding.Driver; each file that adds
// one registers it in an init.
var drivers = map[string]func(*Manager) Driver{}

// acpDriver is ACP (acp.md): the acpx client core.
type acpDriver struct{ m *Manager }

func (d acpDriver) Feed(p []byte) ([]provider.Inbound, error) { return d.m.cl.Feed(p) }
func (d acpDriver) Prompt(turnID, text string) (provider.Call, error) {
	return d.m.cl.Prompt(turnID, text)
}
func (d acpDriver) Cancel() ([][]byte, error) { return d.m.cl.Cancel() }
func (d acpDriver) KeepsRunning() bool        { return false }

func (d acpDriver) HandleRequest(provider.Inbound) ([]provider.Event, [][]byte, bool) {
	return nil, nil, false
}

// Open is initialize, then session/new, resume or load with the bridge
// in mcpServers (acp.md §4.1, tools.md §2).
func (d acpDriver) Open(ctx context.Context, o OpenSession) error {
	m := d.m
	if _, err := o.Call(m.cl.Initialize); err != nil {
		return err
	}
	m.mu.Lock()
	caps := m.cl.Capabilities()
	// The bridge listens before the session line is written, and the
	// commit that precedes that line records its port and secret.
	servers := m.mcpServersLocked(caps)
	m.mu.Unlock()
	if !o.Resume {
		_, err := o.Call(func() (provider.Call, error) { return m.cl.NewSession(o.Binding.Cwd, servers) })
		return err
	}
	var err error
	switch {
	case caps.SessionCapabilities.Resume != nil:
		_, err = o.Call(func() (provider.Call, error) { return m.cl.ResumeSession(servers) })
	case caps.LoadSession:
		_, err = o.Call(func() (provider.Call, error) { return m.cl.LoadSession(servers) })
	default:
		err = provider.NewFailure(provider.ClassSessionResumeRequired, errors.New("agent supports neither session/resume nor session/load"))
	}
	return err
}

// openCall is OpenSession.Call over m.call.
func (m *Manager) openCall(ctx context.Context, deadline <-chan time.Time) func(mk func() (provider.Call, error)) (provider.Inbound, error) {
	return func(mk func() (provider.Call, error)) (provider.Inbound, error) {
		return m.call(ctx, deadline, func(*acpx.Client) (provider.Call, error) { return mk() })
	}
}
