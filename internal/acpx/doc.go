// Package acpx is runnerd's ACP (Agent Client Protocol, v1) client core and
// its ACP → PRP event mapping.
//
// The core is transport independent: runnerd owns the JSON-RPC framing and
// the request table (acp.md §8) because both must survive a runnerd restart.
// A [Client] turns calls into wire lines (ids taken from the durable
// [Record]) and turns inbound stdout bytes into ordered [Inbound] messages;
// it never reads or writes a file descriptor. Whoever moves the bytes (pcwrap
// session files in runnerd, plain pipes in acpxtest.Conn for tests)
// persists [Client.Record] before it writes a line, so a restarted runnerd
// resumes with the same ids, the same pending requests and the same partial
// stdout line.
//
// The mapping half ([Mapper]) is pure: given ACP updates and prompt outcomes
// it yields PRP event descriptions ({eventType, priority, payload}) that
// validate against the reference PRP schemas, with every known secret value
// redacted.
package acpx
