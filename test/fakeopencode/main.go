// Command fakeopencode is a deterministic fake of `opencode serve`
// (OpenCode 1.18.x's HTTP + SSE server, codex.md §6) for pcrunner's tests.
// It starts as the real one does, `fakeopencode serve --hostname
// 127.0.0.1 --port N`, prints "opencode server listening on
// http://127.0.0.1:PORT" first on stdout, and checks HTTP basic auth
// (user "opencode" or OPENCODE_SERVER_USERNAME) against
// OPENCODE_SERVER_PASSWORD when that is set, as OpenCode does. Port 0 is
// any free port (the real server tries 4096 first).
//
// # Routes
//
//	POST /session                       → a Session
//	POST /session/{id}/prompt_async     204; the turn streams on /event
//	                                    (400 for a body field OpenCode does not
//	                                    take, 409 while a turn runs)
//	POST /session/{id}/abort            → true; the running turn ends aborted
//	GET  /session/{id}/message          → [{info, parts}]
//	GET  /session/status                → {sessionID: {type}} of busy sessions
//	POST /permission/{id}/reply         → true; {reply: once|always|reject}
//	GET  /event                         SSE: data: {id, type, properties}
//
// # Script
//
// The prompt's first "FAKEOC:" starts a directive running to the end of
// its line; without one the answer is a fixed sentence.
//
//	FAKEOC: text WORDS...     one text part, one delta per word
//	FAKEOC: tool CMD...       a bash tool part (pending, running, completed
//	                          with output "ran: CMD"), then text "done"
//	FAKEOC: permission CMD... a bash tool part that asks permission.asked and
//	                          waits: once/always → completed, reject → error
//	FAKEOC: slow N MS         N deltas "slow " MS ms apart, abortable
//	                          (N <= 1000, MS <= 10000)
//	FAKEOC: drop WORDS...     the first delta streams, then every event
//	                          stream is closed and the rest of the turn
//	                          happens unseen (recover it from the list)
//	FAKEOC: todo              a todo.updated with two todos, then text
//	FAKEOC: error NAME        the turn fails with session.error NAME
//	FAKEOC: reasoning WORDS   a reasoning part, then text "done"
//
// Every turn ends with a step-finish part (tokens: input 10, output the
// number of words), the assistant message's finish and time.completed,
// session.status idle and session.idle. Ids ascend within a process
// (msg_/prt_/per_ + a counter) and times come from a counter, so the
// same requests give the same bytes.
//
// # Flags
//
//	--hostname H    must be a loopback address (default 127.0.0.1)
//	--port N        (default 0)
//	--idle D        exit after D without a request (default 10m)
//	--record FILE   append each request as NDJSON: method, path, body (never
//	                the Authorization header)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// defaultIdle is how long the fake waits for a request before it exits,
// so a test that forgets it leaks nothing for long.
const defaultIdle = 10 * time.Minute

// shutdownGrace bounds the wait for open streams on exit.
const shutdownGrace = 2 * time.Second

type config struct {
	host   string
	port   int
	idle   time.Duration
	record string
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	if len(args) == 0 || args[0] != "serve" {
		return c, errors.New("parse args: the first argument must be serve")
	}
	fs := flag.NewFlagSet("fakeopencode serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.host, "hostname", "127.0.0.1", "listen address (loopback only)")
	fs.IntVar(&c.port, "port", 0, "port (0: any free port)")
	fs.DurationVar(&c.idle, "idle", defaultIdle, "exit after this long without a request")
	fs.StringVar(&c.record, "record", "", "append each request as NDJSON to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, errors.New("parse args: unexpected arguments")
	}
	if ip := net.ParseIP(c.host); ip == nil || !ip.IsLoopback() {
		return c, errors.New("parse args: --hostname must be a loopback address")
	}
	if c.port < 0 || c.port > 65535 {
		return c, errors.New("parse args: --port not in 0..65535")
	}
	if c.idle <= 0 {
		return c, errors.New("parse args: --idle must be positive")
	}
	return c, nil
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeopencode:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fakeopencode:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, stdout io.Writer) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv, err := newServer(cfg, os.Getenv("OPENCODE_SERVER_USERNAME"), os.Getenv("OPENCODE_SERVER_PASSWORD"))
	if err != nil {
		ln.Close()
		return err
	}
	defer srv.close()
	hs := &http.Server{Handler: srv.handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "opencode server listening on http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	idle := time.NewTimer(cfg.idle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return shutdown(hs, srv)
		case err := <-errc:
			return err
		case <-srv.activity:
			idle.Reset(cfg.idle)
		case <-idle.C:
			return shutdown(hs, srv)
		}
	}
}

func shutdown(hs *http.Server, srv *server) error {
	srv.closeStreams()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	return nil
}
