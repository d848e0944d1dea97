// Package acpx is runnerd's ACP (Agent Client Protocol, v1) client: the
// protocol's requests and their answers over the shared JSON-RPC core of
// package provider, and the ACP agents' launch (commands, bounds,
// environment allowlist).
//
// The client is transport independent: runnerd owns the JSON-RPC framing
// and the request table (acp.md §8) because both must survive a runnerd
// restart. A [Client] turns calls into wire lines (ids taken from the
// durable provider.Record) and turns inbound stdout bytes into ordered
// provider.Inbound messages; it never reads or writes a file descriptor.
// Whoever moves the bytes (pcwrap session files in runnerd, plain pipes in
// acpxtest.Conn for tests) persists [Client.Record] before it writes a
// line, so a restarted runnerd resumes with the same ids, the same pending
// requests and the same partial stdout line.
package acpx
