// Package prp is the Paperclip Runner Protocol wire layer, byte-compatible
// with the Paperclip server (spec: shared/spec/prp.md), for both roles.
//
// Crypto and handshake (canonical JSON, key derivation, secure frames,
// envelopes, ClientHandshake and the decoders of the messages the core
// reads) live in canonical*.go, crypto*.go, secure*.go, envelope*.go,
// message*.go and handshake*.go. The controller half (Core, its handshake
// and credential store) is package control, built on what peer.go,
// ParseAuthHello, ParseAuthResponse, ServerProof, VerifyClientProof and
// NewCoreSession export; runnerd does not link it.
//
// Transport and sessions live in the other files:
//
//   - url.go: parseDialURL and ValidateListenPath (spec §1.2, §1.3).
//   - dialer.go: NewDialer resolves once, pins the sorted addresses and
//     connects with a per-address and a total budget; ws:// only to loopback.
//   - listener.go: Listen serves exactly one upgrade path and answers 400 to
//     everything else; it keeps accepting while a connection is up.
//   - wsconn.go, conn.go: one authenticated connection. A reader goroutine
//     only reads, opens and classifies frames; PRP pings go to the priority
//     lane of the single writer goroutine, which seals every frame in send
//     order; a WebSocket Ping goes out after PingInterval without sending;
//     SilenceTimeout without any inbound frame closes the connection as
//     half-open (spec §4).
//   - backoff.go: the reconnect delay formula (spec §6.1).
//   - client.go: Client, the runner half: dial or listen mode, lease renewal
//     at half the remaining lease, revoke, reconnects, reconnect grace and
//     lifetime deadlines, newest-wins in listen mode (spec §4–§6). Its user
//     (runnerd's control loop) gets OnAuthenticated per connection (replay
//     the outbox there), OnControl for commands and ACKs, OnLost, and sends
//     durable event and command_result bytes with Conn.Send.
//   - peer.go: PeerConn and Link, the same connection machinery for the
//     controller half (package control): accept or dial, then a link
//     without pong answering or a send window.
//
// Timing is written against the time package so that tests run it in
// simulated time with testing/synctest over in-memory pipes.
package prp
