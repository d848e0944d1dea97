// Package control is the controller half of PRP (spec: shared/spec/prp.md),
// byte-compatible with the Paperclip server's core: Core mints bootstrap
// tickets, holds connection leases, journals commands (only the lowest
// pending one is delivered; the welcome re-delivers it), admits events with
// cumulative ACKs, and keeps the newest authenticated connection (spec
// §3–§9). Handshake is its half of the handshake and MemoryCredentialStore
// its in-memory tickets and leases.
//
// prpctl and tests use it; runnerd never does (deps_test.go pins that), so
// the runner binary carries no controller code. It is built on package
// prp's wire layer and on the connection machinery prp exports for it
// (prp.PeerConn, prp.Link).
package control
