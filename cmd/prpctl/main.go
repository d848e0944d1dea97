// Command prpctl is a small PRP control plane for poking a runnerd by hand
// and for end-to-end tests. It is the core (controller) half of PRP: it
// mints a bootstrap ticket, launches runnerd (listen or dial mode) or
// attaches to one already listening, sends commands from flags or a script
// file, ACKs every event and prints events and command results as JSON lines
// on stdout. See prpctl --help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
