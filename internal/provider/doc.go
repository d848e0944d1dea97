// Package provider is the model every provider driver emits and the agent
// supervisor consumes, owned by none of the drivers: the inbound messages
// ([Inbound]) a driver decodes from its agent, the PRP event descriptions
// ([Event]) the [Mapper] makes of them, the failure classes and loss
// reasons the supervisor reports, the durable session [Record] with its
// request table, and the JSON-RPC core ([Core], [Dialect]) ACP and Codex's
// app-server share: durable ids, pending requests both ways and the one
// path that answers an agent request.
//
// The session-update vocabulary ([SessionUpdate], [ContentBlock],
// [PlanEntry], [TokenUsage], permission requests) is ACP's (acp.md §1):
// Codex's and OpenCode's drivers translate their protocols into it, so one
// mapping gives every provider the same PRP events. The mapping is pure:
// given updates and prompt outcomes it yields PRP event descriptions
// ({eventType, priority, payload}) that validate against the reference PRP
// schemas, with every known secret value redacted.
package provider
