package acpx

import (
	"context"
	"errors"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// Host is what ACP's driver needs of its host beyond provider.Host. The
// supervisor keeps the session's Client (it also sets the session meta,
// records the advertised capabilities and drives the goal extension), so
// the driver asks for it rather than owning one.
type Host interface {
	provider.Host
	// Client is the session's ACP client. Its methods need the lock.
	Client() *Client
	// MCPServers lists the MCP servers a session with caps is offered;
	// the bridge listens before it returns, and the commit that precedes
	// the session line records its port and secret. Lock held.
	MCPServers(caps provider.AgentCapabilities) []MCPServer
}

// Registration is ACP's entry in the runner's provider list: descriptor
// kind acpx, recorded as the empty driver name.
var Registration = provider.Registration{Kind: "acpx", Driver: "", New: NewDriver, Describe: describe}

// describe gives a descriptor without a command the known agent's
// (acp.md §2.1).
func describe(s *provider.LaunchSpec) error {
	if s.Command != "" {
		return nil
	}
	argv, ok := AgentCommand(s.Agent)
	if !ok {
		return provider.Failed("provider descriptor names an unknown agent without a command")
	}
	s.Command, s.Args = argv[0], argv[1:]
	return nil
}

// NewDriver is ACP's driver (acp.md); h must be a Host.
func NewDriver(h provider.Host) provider.Driver { return driver{h.(Host)} }

// driver is ACP (acp.md) over the host's Client.
type driver struct{ h Host }

func (d driver) Feed(p []byte) ([]provider.Inbound, error) { return d.h.Client().Feed(p) }

func (d driver) Prompt(turnID, text string) (provider.Call, error) {
	return d.h.Client().Prompt(turnID, text)
}

func (d driver) Cancel() ([][]byte, error) { return d.h.Client().Cancel() }

// KeepsRunning is false: ACP stops the agent after every cancel
// (acp.md §4.4).
func (d driver) KeepsRunning() bool { return false }

// HandleRequest leaves every request to the supervisor's shared handling
// (permissions, client fs and terminals, -32601).
func (d driver) HandleRequest(provider.Inbound) ([]provider.Event, [][]byte, bool) {
	return nil, nil, false
}

// Open is initialize, then session/new, resume or load with the bridge
// in mcpServers (acp.md §4.1, tools.md §2).
func (d driver) Open(ctx context.Context, o provider.OpenSession) error {
	h := d.h
	if _, err := o.Call(h.Client().Initialize); err != nil {
		return err
	}
	var caps provider.AgentCapabilities
	var servers []MCPServer
	h.WithLock(func() {
		caps = h.Client().Capabilities()
		servers = h.MCPServers(caps)
	})
	if !o.Resume {
		_, err := o.Call(func() (provider.Call, error) { return h.Client().NewSession(o.Cwd, servers) })
		return err
	}
	var err error
	switch {
	case caps.SessionCapabilities.Resume != nil:
		_, err = o.Call(func() (provider.Call, error) { return h.Client().ResumeSession(servers) })
	case caps.LoadSession:
		_, err = o.Call(func() (provider.Call, error) { return h.Client().LoadSession(servers) })
	default:
		err = provider.NewFailure(provider.ClassSessionResumeRequired, errors.New("agent supports neither session/resume nor session/load"))
	}
	return err
}
