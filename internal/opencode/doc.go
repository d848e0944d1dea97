// Package opencode is runnerd's OpenCode driver (driver.go) and its client
// of the OpenCode server (`opencode serve`, codex.md §6): its loopback HTTP
// API with HTTP basic auth, the server-sent event stream, and the
// translation of OpenCode's events into the provider.Inbound model the
// agent Manager consumes, so the PRP events come from the one
// provider.Mapper every driver shares.
//
// Pinned API: opencode-ai 1.18.33 (the version the npm registry serves
// here; codex.md §6 names 1.18.34, which it does not serve). The routes,
// bodies and event shapes were checked against that build's own OpenAPI
// document (GET /doc) and a live run against test/fakellm; no code was
// taken from OpenCode.
//
// The endpoints used:
//
//	POST /session                        create a session → {id, ...}
//	POST /session/{id}/prompt_async      start a turn (204); body
//	                                     {model: {providerID, modelID}, system, parts: [{type: "text", text}]}
//	POST /session/{id}/abort             abort the running turn → true
//	GET  /session/{id}/message           [{info, parts}] (recovery)
//	GET  /session/status                 {sessionID: {type: idle|busy|retry}}
//	POST /permission/{requestID}/reply   {reply: once|always|reject}
//	GET  /event                          SSE: data: {id, type, properties}
//
// Note for codex.md §6: 1.18.33's prompt_async takes the model as
// {model: {providerID, modelID}} and rejects unknown top-level fields, so
// a top-level providerID/modelID is a 400; `--port 0` first tries 4096 and
// the port is known only from the stdout line "opencode server listening
// on http://127.0.0.1:PORT" (listenURL parses it).
//
// The SSE stream is not durable (no replay on reconnect). After a
// reconnect or a runnerd restart, Translator.Recover rebuilds what was
// missed from the message list, and the per-part record of what was
// already emitted (State) drops duplicates by message-part id: at least
// once on the wire, exactly once in PRP.
//
// The server password is random per session (newPassword), lives in the
// caller's 0600 record and in memory, reaches the opencode process only as
// OPENCODE_SERVER_PASSWORD (serverEnv), and is never logged or put in an
// error.
package opencode
