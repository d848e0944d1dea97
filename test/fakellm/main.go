// Command fakellm is a deterministic fake model server for running real
// coding agents offline in pcrunner's tests. It listens on
// 127.0.0.1 only, speaks four provider APIs with their real streaming wire
// formats, and exits by itself.
//
// # APIs
//
//   - Anthropic Messages: POST /v1/messages (SSE when "stream" is true:
//     message_start, ping, content_block_start/delta/stop with text_delta
//     and input_json_delta, message_delta with stop_reason and usage,
//     message_stop; else one Message), POST /v1/messages/count_tokens, and
//     GET or HEAD / (200, Claude Code probes it).
//   - OpenAI Responses: POST /v1/responses (SSE: response.created,
//     response.in_progress, response.output_item.added/done for message,
//     function_call and custom_tool_call items,
//     response.content_part.added/done, response.output_text.delta/done,
//     response.function_call_arguments.delta/done,
//     response.custom_tool_call_input.delta/done, response.completed with
//     usage).
//   - OpenAI Chat Completions: POST /v1/chat/completions (SSE chunks with
//     delta.content and delta.tool_calls, a finish_reason chunk, a usage
//     chunk when stream_options.include_usage, then data: [DONE]) and
//     GET /v1/models (read by OpenAI and Anthropic clients alike).
//   - Gemini: POST /v1beta/models/{model}:streamGenerateContent?alt=sse,
//     :generateContent and :countTokens. When generationConfig asks for
//     responseMimeType application/json with a responseJsonSchema or
//     responseSchema, the answer is a minimal instance of that schema (its
//     required properties, an enum's first value, the shortest arrays and
//     strings allowed, numbers 1 unless the bounds say otherwise, since
//     clients check ranges that schemas only describe), whatever the
//     prompt says.
//
// Any API key header is accepted and none is checked or logged.
//
// # Script
//
// The model reads the last message of the request that is not a system or
// developer message (Claude Code sends system messages after the user's).
// When it is a tool result, the answer is the text "tool said: " and the
// result (the first 2000 bytes), or, on the Anthropic and OpenAI Responses
// APIs, the then WORDS of the tool directive of the user message before the
// results; when it is
// the model's own, the fixed
// sentence. Otherwise that user message's text is the script: the
// first occurrence of "FAKELLM:" starts a directive that runs to the end of
// its line (anything around it, such as an agent's own context, is
// ignored; a directive quoted whole, as in "FAKELLM: ...", loses its
// quotes):
//
//	FAKELLM: text WORDS...        answer WORDS as text
//	FAKELLM: tool NAME [{JSON}]   call tool NAME with the JSON object as
//	                              arguments (default {}); NAME picks the
//	                              offered tool of that name, else the first
//	                              whose name ends in "_NAME" (an MCP tool:
//	                              mcp__paperclip__op for op); a tool the
//	                              Responses request offers as a custom
//	                              (freeform) tool, such as Codex's
//	                              apply_patch, gets a custom_tool_call whose
//	                              input is the object's "input" string
//	FAKELLM: tool NAME {JSON} then WORDS...
//	                              the same; once the result is back, answer
//	                              WORDS as text (Anthropic and OpenAI
//	                              Responses APIs)
//	FAKELLM: shell COMMAND...     call the request's shell tool (the first
//	                              offered of Bash, exec_command, shell, bash,
//	                              run_shell_command) with COMMAND in the
//	                              arguments that tool takes; Codex's calls ask
//	                              sandbox_permissions "require_escalated"
//	FAKELLM: slow N MS [WORDS]    answer N chunks of WORDS (default "slow"),
//	                              MS milliseconds apart (N <= 1000,
//	                              MS <= 10000), to be interrupted
//
// A call of a tool the request does not offer any tools for, or a
// malformed directive, is answered as text saying so. Without a directive
// the answer is a fixed sentence. Ids count up from 1 in each process
// (msg_fakellm_0001, toolu_fakellm_0002, ...), and no answer holds the
// time, so the same requests get the same bytes.
//
// # Flags
//
//	--port N               port on 127.0.0.1 (default 0: any free port)
//	--addr-file FILE       also write FAKELLM_URL=... to FILE (atomically)
//	--idle D               exit after D without a request (default 120s)
//	--exit-on-stdin-eof    exit when stdin reaches EOF
//	--record FILE          append each request as one NDJSON line: method,
//	                       path, query and headers without credentials, body
//
// The first stdout line is FAKELLM_URL=http://127.0.0.1:PORT.
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
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// defaultIdle is how long fakellm waits for a request before it exits, so
// a test that forgets it leaks nothing for long.
const defaultIdle = 120 * time.Second

// shutdownGrace bounds the wait for open streams (a slow answer) on exit.
const shutdownGrace = 2 * time.Second

type config struct {
	port           int
	addrFile       string
	idle           time.Duration
	exitOnStdinEOF bool
	record         string
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("fakellm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.port, "port", 0, "port on 127.0.0.1 (0: any free port)")
	fs.StringVar(&c.addrFile, "addr-file", "", "also write FAKELLM_URL=... to this file")
	fs.DurationVar(&c.idle, "idle", defaultIdle, "exit after this long without a request")
	fs.BoolVar(&c.exitOnStdinEOF, "exit-on-stdin-eof", false, "exit when stdin reaches EOF")
	fs.StringVar(&c.record, "record", "", "append each request as NDJSON to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, errors.New("parse flags: unexpected arguments")
	}
	if c.port < 0 || c.port > 65535 {
		return c, errors.New("parse flags: --port not in 0..65535")
	}
	if c.idle <= 0 {
		return c, errors.New("parse flags: --idle must be positive")
	}
	return c, nil
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakellm:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fakellm:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, the idle bound passes, or (with
// --exit-on-stdin-eof) stdin ends.
func run(ctx context.Context, cfg config, stdin io.Reader, stdout io.Writer) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var rec io.Writer
	if cfg.record != "" {
		f, err := openRecord(cfg.record)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer f.Close()
		rec = f
	}
	line := "FAKELLM_URL=http://" + ln.Addr().String() + "\n"
	if cfg.addrFile != "" {
		if err := writeAtomic(cfg.addrFile, line); err != nil {
			_ = ln.Close()
			return err
		}
	}
	if _, err := io.WriteString(stdout, line); err != nil {
		_ = ln.Close()
		return fmt.Errorf("write url: %w", err)
	}
	idle := newIdler(cfg.idle)
	defer idle.stop()
	srv := &http.Server{Handler: newServer(idle, rec).handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	eof := make(chan struct{})
	if cfg.exitOnStdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			close(eof)
		}()
	}
	select {
	case <-ctx.Done():
	case <-idle.done:
	case <-eof:
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-served
	return nil
}

// writeAtomic writes text to path through a temporary file and a rename,
// so a reader never sees half a line.
func writeAtomic(path, text string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fakellm-addr-*")
	if err != nil {
		return fmt.Errorf("write addr file: %w", err)
	}
	_, werr := tmp.WriteString(text)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write addr file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write addr file: %w", err)
	}
	return nil
}
