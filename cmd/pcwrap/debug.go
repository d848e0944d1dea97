package main

import (
	"fmt"
	"io"
)

// runDebug runs a host-side debugging subcommand (pcwrap send|stop|tail,
// spec §10) and returns the process exit status.
//
// Placeholder: replaced by the real subcommands.
func runDebug(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintf(stderr, "pcwrap %s: not implemented yet\n", name)
	return 2
}
