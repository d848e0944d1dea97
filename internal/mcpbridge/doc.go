// Package mcpbridge is the loopback MCP server runnerd gives each provider
// session (tools.md §2): Streamable HTTP, one JSON answer per POST, a bearer
// secret, and exactly the methods the spec lists. It answers initialize,
// ping, tools/list and the notifications itself and hands every well-formed
// tools/call to a Handler.
//
// The server is hand-written: the surface is
// small, the answers must be the spec's bytes, the port, secret and session
// id survive a hot restart, and no goroutine runs per session beyond the
// listener's Serve loop (net/http's per-connection goroutines aside).
//
// Wire decisions the spec leaves open, kept here so they are tested and
// stable:
//
//   - Checks run in this order: Origin/Host (403), bearer (401, with
//     WWW-Authenticate: Bearer), path (404), method (405, Allow: POST),
//     media type (415), Mcp-Session-Id (404), body size (413), JSON-RPC.
//     Authentication comes before the path and method so that a process
//     without the secret learns nothing but 401.
//   - Malformed JSON → HTTP 400 with {"jsonrpc":"2.0","id":null,"error":
//     {"code":-32700,…}}; a batch or a message that is not a JSON-RPC 2.0
//     request, notification or response → HTTP 400 with -32600 and id null.
//     MCP Streamable HTTP (2025-03-26, "Sending Messages to the Server" item
//     4) answers unacceptable input with an HTTP error status and a JSON-RPC
//     error without id; for an unparsable body the server cannot know whether
//     it held a request, so it answers the same way.
//   - Every request (it has an id) gets HTTP 200 with Content-Type
//     application/json and one JSON-RPC response, never an SSE stream; an
//     unknown method → -32601, bad tools/call params (name not a string,
//     arguments neither absent, null nor an object) → -32602.
//   - Notifications (any method, known or not) and JSON-RPC responses from
//     the client → 202 with an empty body. notifications/cancelled
//     {requestId} cancels the ctx of the pending call with that JSON-RPC id.
//   - initialize always answers protocolVersion "2025-03-26", whatever the
//     client asked: MCP's version negotiation lets a server answer the one
//     version it supports, and the client decides whether to go on (the Go
//     SDK's client accepts it). Other MCP clients probe with server/discover
//     first; that is an unknown method (-32601), after which they fall back
//     to initialize.
//   - Mcp-Session-Id: a request that carries one other than ours → 404 (MCP:
//     the session is gone, start a new one). A request without the header is
//     accepted (lenient: initialize has none, and a client that drops it
//     still holds the secret).
//   - The server keeps no per-client state: any request is answered before
//     or without initialize (after a hot restart the agent does not
//     initialize again), and the Accept and Mcp-Protocol-Version headers
//     are not checked (lenient: they cannot change the one JSON answer).
//   - A tools/call whose name is empty or holds a NUL or any other control
//     character → tool error "Unsupported tool." without calling the
//     Handler. The 33rd call pending at once → tool error "Too many pending
//     tool calls." without calling the Handler.
//   - A call whose ctx is cancelled (connection closed, notifications/
//     cancelled, Server.Close) gets no JSON-RPC answer: the handler's result
//     is dropped and the HTTP exchange is aborted (http.ErrAbortHandler), as
//     MCP says a cancelled request gets no response.
//
// Logs carry the HTTP status and a fixed reason only: never the secret, the
// session id, a header value, a tool name or a body.
package mcpbridge
