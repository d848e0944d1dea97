package acpx

import (
	"encoding/json"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// protocolVersion is the only ACP version runnerd speaks (acp.md §1).
const protocolVersion = 1

// initializeParams is the initialize request. clientCapabilities is what
// the session record holds (Client.SetClientCapabilities).
type initializeParams struct {
	ProtocolVersion    int                         `json:"protocolVersion"`
	ClientCapabilities provider.ClientCapabilities `json:"clientCapabilities"`
	ClientInfo         provider.Implementation     `json:"clientInfo"`
}

// initializeResult is the part of the initialize answer runnerd reads.
// AgentCapabilities is kept raw for the durable record.
type initializeResult struct {
	ProtocolVersion   int                      `json:"protocolVersion"`
	AgentCapabilities json.RawMessage          `json:"agentCapabilities,omitempty"`
	AgentInfo         *provider.Implementation `json:"agentInfo,omitempty"`
	// Meta is the result's _meta (the goal extension lives there).
	Meta json.RawMessage `json:"_meta,omitempty"`
}

// MCPServer is one HTTP MCP server entry of session/new, session/load and
// session/resume (ACP McpServer, type "http"; tools.md §2). Header values
// carry the bridge's bearer secret: they are sent, never recorded or
// logged.
type MCPServer struct {
	Type    string       `json:"type"`
	Name    string       `json:"name"`
	URL     string       `json:"url"`
	Headers []HTTPHeader `json:"headers"`
}

// MCPTransportHTTP is MCPServer.Type for Streamable HTTP.
const MCPTransportHTTP = "http"

// HTTPHeader is one {name, value} header of an HTTP MCP server entry.
type HTTPHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// envVariable is one {name, value} pair.
type envVariable struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// newSessionParams is session/new. Meta is the session _meta (tools.md §5:
// instructions and model), omitted when empty.
type newSessionParams struct {
	Cwd        string          `json:"cwd"`
	MCPServers []MCPServer     `json:"mcpServers"`
	Meta       json.RawMessage `json:"_meta,omitempty"`
}

// loadSessionParams is session/load and session/resume; Meta as in
// newSessionParams (the Claude adapter builds a resumed session from it).
type loadSessionParams struct {
	SessionID  string          `json:"sessionId"`
	Cwd        string          `json:"cwd"`
	MCPServers []MCPServer     `json:"mcpServers"`
	Meta       json.RawMessage `json:"_meta,omitempty"`
}

// sessionResult is the answer of session/new (and the optional body of
// session/load): sessionId plus the harness id in _meta.agentSessionId.
type sessionResult struct {
	SessionID string `json:"sessionId"`
	Meta      struct {
		AgentSessionID string `json:"agentSessionId"`
	} `json:"_meta"`
}

// PromptParams is session/prompt.
type PromptParams struct {
	SessionID string                  `json:"sessionId"`
	Prompt    []provider.ContentBlock `json:"prompt"`
}

// promptResult is the prompt answer; Usage is unstable and optional.
type promptResult struct {
	StopReason string               `json:"stopReason"`
	Usage      *provider.TokenUsage `json:"usage,omitempty"`
}

// cancelParams is session/cancel.
type cancelParams struct {
	SessionID string `json:"sessionId"`
}

// sessionNotification is the session/update params.
type sessionNotification struct {
	SessionID string          `json:"sessionId"`
	Update    json.RawMessage `json:"update"`
}

// PermissionResponse is the session/request_permission result.
type PermissionResponse struct {
	Outcome provider.PermissionOutcome `json:"outcome"`
}

// cancelRequestParams is $/cancel_request.
type cancelRequestParams struct {
	RequestID json.RawMessage `json:"requestId"`
}
