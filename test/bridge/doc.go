// Package bridge emulates the Paperclip host's process-session bridge
// (spec pcwrap-protocol.md §9) for black-box tests of pcwrap: it runs the
// host's sh -c scripts for real (launch, writeTextFile uploads, tolerant
// event polling, stop) against the built pcwrap binary.
package bridge
