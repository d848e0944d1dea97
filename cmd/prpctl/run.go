package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/logging"
	"github.com/pcrunner/pcrunner/internal/outputbody"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/quote"
)

// Bounds of prpctl (beyond; an operator tool).
const (
	// defaultTimeout bounds a whole prpctl run unless --timeout says otherwise.
	defaultTimeout = 60 * time.Second
	// redialDelay spaces the core's re-dials of a listening runnerd (the
	// server's first ingress retry delay, prp.md §6.2: 250 ms).
	redialDelay = 250 * time.Millisecond
	// stopGrace is how long runnerd gets after SIGTERM before SIGKILL
	// (the server's close grace, prp.md §12: 10 s).
	stopGrace = 10 * time.Second
	// listenWait bounds the wait for runnerd's "listening" log line.
	listenWait = 10 * time.Second
	// upgradeHeaderWait bounds a dialling runnerd's upgrade request headers
	// (runnerd's own listener uses the same 2 s, prp.md §1.2).
	upgradeHeaderWait = 2 * time.Second
	// ticketEnv carries the ticket to runnerd and, in attach mode, to prpctl.
	ticketEnv = "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET"
)

const usage = `prpctl: a small PRP control plane that drives one runnerd.

USAGE
  prpctl --mode dial   --runnerd PATH --state-dir DIR [OPTIONS]
      serve the core on 127.0.0.1 and launch runnerd with --connect-url
  prpctl --mode listen --runnerd PATH --state-dir DIR [OPTIONS]
      launch runnerd listening on 127.0.0.1 and dial it
  prpctl --mode attach --url ws://HOST:PORT/api/runner/v1/connect/RUN [OPTIONS]
      dial a runnerd that is already listening; its ticket comes from
      PAPERCLIP_RUNNER_BOOTSTRAP_TICKET (see --mode mint-ticket)
  prpctl --mode mint-ticket
      print a fresh random bootstrap ticket

Commands run in order: every --command first, then the --script steps. Each
command waits its turn in the core journal (one in flight, prp.md §7.1).
stdout gets one JSON line per committed event, command result and runnerd
exit, and after an event carrying outputBody one {"kind":"output_body"} line:
the body as the core reassembled and verified it from its chunks (byteLength,
sha256, httpStatus 200; or the server's 404/409 and its message). runnerd's
own output goes to stderr. Exit status: 0 when every command got a result in
time, 1 otherwise, 2 for a usage error. When the runnerd that
prpctl launched exits before every command has its result, prpctl stops at
once and exits with runnerd's status (1 when that status is 0).

A launched runnerd runs warm (--lifecycle-mode warm, idle for --timeout),
since a script drives several commands and turns through one process; pass
--runnerd-arg=--lifecycle-mode --runnerd-arg=per_turn for the per-turn
default of the server (runnerd exits after its turn, prp.md §7.4).

SCRIPT (JSON lines, # comments)
  {"command":"` + prp.CommandSessionSnapshot + `","payload":{}}   queue a command
  {"sleepMs":200}   {"ping":true}   {"revoke":1}   {"drop":true}
  {"wait":true}     wait until every queued command has a result
  {"attach":{"identity":{six ids},"connection":{"mode":"connect","connectUrl":URL}|
            {"mode":"listen","listenAddress":A,"listenPort":P,"listenPath":PATH},
            "payload":{provider seed}}}
                    queue a warm run.attach handing the runner to the next run;
                    "connection":"auto" names this session's own route for it
                    (the core's dial route, or the listener with the new path)
  {"waitEvent":"` + prp.EventRunTerminal + `"}
                    wait for the next event of that type: the n-th waitEvent
                    of a type waits for the run's n-th event of that type
  {"resolve":"allow"}
                    wait for a runtime request (runtime_request.created) not
                    yet settled nor answered, and answer the latest one with
                    request.resolve: allow|allow_once|accept, allow_always|
                    accept_for_session, reject|reject_once|deny|decline, or
                    cancel; the payload carries resolution.action and the
                    agent option of that kind as response.optionId
  {"toolResults":{"OPERATION_ID":RESULT, ...}}
                    the standing result that answers the agent's calls of
                    that operation (isError false); later steps replace it
  {"toolErrors":{"OPERATION_ID":RESULT, ...}}
                    answer the next call of that operation with RESULT and
                    isError true, once (then the standing result again)

TOOL CALLS
  Every semantic_tool.input event is answered at once with one
  semantic_tool.result command (tools.md §3 item 4): commandId
  command_tool_<first 32 hex of sha256(runId + "\0" + callId)>, payload
  {callId, operationId, inputDigest: content.digest, sourceEventId,
  sourceEventType: "` + prp.EventSemanticToolInput + `", correlation, result, isError}.
  The result is the operation's toolErrors entry (once), else its
  toolResults entry or --tool-result, else for paperclip_finish and
  paperclip_block the acceptance
    {"success":true,"contentItems":[{"type":"inputText","text":"Paperclip accepted the result."}]}
  and for any other operation a tool error (isError true)
    {"success":false,"contentItems":[{"type":"inputText","text":"prpctl has no result ..."}]}.
  A rejection the agent sees as feedback (tools.md §4) is a toolErrors entry
  of that shape: {"success":false,"contentItems":[{"type":"inputText","text":"..."}]}.

OPTIONS
`

type options struct {
	mode, runnerd, url, stateDir, script string
	id                                   prp.Identity
	runnerVersion, runnerDigest          string
	runnerdArgs, commands, toolResults   []string
	timeout, leaseTTL                    time.Duration
}

// parseOptions parses prpctl's flags. --help prints the usage to stdout
// (so it pages) and returns pflag.ErrHelp; an error is the caller's to
// report, with a pointer to --help.
func parseOptions(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := pflag.NewFlagSet("prpctl", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.mode, "mode", "dial", "dial | listen | attach | mint-ticket")
	fs.StringVar(&o.runnerd, "runnerd", "paperclip-runnerd", "runnerd binary to launch (dial and listen modes)")
	fs.StringVar(&o.url, "url", "", "listener URL of a running runnerd (attach mode)")
	fs.StringVar(&o.stateDir, "state-dir", "", "runnerd --state-dir (dial and listen modes)")
	fs.StringVar(&o.script, "script", "", "script file of JSON-line steps (- for stdin)")
	fs.StringArrayVar(&o.commands, "command", nil, "command TYPE or TYPE=JSON-payload (repeatable)")
	fs.StringArrayVar(&o.runnerdArgs, "runnerd-arg", nil, "extra runnerd flag (repeatable)")
	fs.StringArrayVar(&o.toolResults, "tool-result", nil, "OPERATION_ID=JSON: the result answering that tool's calls (repeatable; see TOOL CALLS)")
	fs.StringVar(&o.id.RunnerInstanceID, "runner-id", "runner_local", "runner instance id")
	fs.StringVar(&o.id.EnvironmentLeaseID, "environment-lease-id", "env_local", "environment lease id")
	fs.StringVar(&o.id.RunID, "run-id", "run_local", "run id")
	fs.StringVar(&o.id.NormalizedSessionID, "session-id", "session_local", "normalized session id")
	fs.StringVar(&o.id.TurnID, "turn-id", "turn_local", "turn id")
	fs.StringVar(&o.id.ItemID, "item-id", "item_local", "item id")
	fs.StringVar(&o.runnerVersion, "runner-version", "0.0.0-local", "runner version the core expects")
	fs.StringVar(&o.runnerDigest, "runner-digest", "sha256:"+strings.Repeat("0", 64), "runner digest the core expects")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "bound of the whole run")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", control.DefaultLeaseTTL, "connection lease TTL the core grants")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, usage+fs.FlagUsages())
		}
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %s", quote.Text(fs.Arg(0)))
	}
	switch o.mode {
	case "dial", "listen":
		if o.stateDir == "" {
			return o, errors.New("--state-dir is required in dial and listen mode")
		}
		if !filepath.IsAbs(o.stateDir) {
			// As runnerd: a relative state dir would land wherever prpctl
			// happens to run (a repository checkout, typically).
			return o, fmt.Errorf("--state-dir must be an absolute path, got %s", quote.Text(o.stateDir))
		}
	case "attach":
		if o.url == "" {
			return o, errors.New("--url is required in attach mode")
		}
	case "mint-ticket":
	default:
		return o, errors.New("--mode must be dial, listen, attach or mint-ticket")
	}
	if o.timeout <= 0 {
		return o, errors.New("--timeout must be positive")
	}
	return o, nil
}

// isLifecycleFlag reports a --lifecycle-mode=VALUE argument.
func isLifecycleFlag(a string) bool { return strings.HasPrefix(a, "--lifecycle-mode=") }

// out writes JSON lines to stdout; safe for concurrent use.
type out struct {
	// mu serialises whole lines on w.
	mu sync.Mutex
	w  io.Writer
}

func (o *out) line(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stdout)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "prpctl: usage: %v\nRun 'prpctl --help' for usage.\n", err)
		return 2
	}
	if o.mode == "mint-ticket" {
		var b [24]byte
		_, _ = rand.Read(b[:])
		fmt.Fprintln(stdout, "bootstrap_"+hex.EncodeToString(b[:]))
		return 0
	}
	steps, err := loadSteps(o, stdin)
	if err == nil && len(steps) == 0 {
		err = errors.New("nothing to do: give --command or --script")
	}
	if err != nil {
		fmt.Fprintf(stderr, "prpctl: usage: %v\n", err)
		return 2
	}
	tools := newToolAnswerer()
	for _, v := range o.toolResults {
		op, r, err := parseToolResultFlag(v)
		if err != nil {
			fmt.Fprintf(stderr, "prpctl: usage: %v\n", err)
			return 2
		}
		tools.set(map[string]json.RawMessage{op: r}, nil)
	}
	// The core below adds its own component (prp.core); logging joins them.
	log := logging.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "prpctl")
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := drive(ctx, o, steps, tools, &out{w: stdout}, stderr, log); err != nil {
		fmt.Fprintf(stderr, "prpctl: %v\n", err)
		var exited *runnerdExitedError
		if errors.As(err, &exited) && exited.code > 0 {
			return exited.code
		}
		return 1
	}
	return 0
}

// errRunnerdExited is the cause of the run context's end when the launched
// runnerd exits.
var errRunnerdExited = errors.New("runnerd exited")

// runnerdExitedError is a run cut short because the launched runnerd
// exited; prpctl exits with code when it is not 0.
type runnerdExitedError struct {
	code int
	what string // what was left undone
}

func (e *runnerdExitedError) Error() string {
	return fmt.Sprintf("runnerd exited with status %d %s", e.code, e.what)
}

func loadSteps(o options, stdin io.Reader) ([]step, error) {
	var steps []step
	for _, c := range o.commands {
		s, err := parseCommandFlag(c)
		if err != nil {
			return nil, err
		}
		steps = append(steps, s)
	}
	if o.script != "" {
		var r io.Reader = stdin
		if o.script != "-" {
			f, err := os.Open(o.script)
			if err != nil {
				return nil, fmt.Errorf("open script: %w", err)
			}
			defer f.Close()
			r = f
		}
		more, err := parseScript(r)
		if err != nil {
			return nil, err
		}
		steps = append(steps, more...)
	}
	return steps, nil
}

// drive runs one session: core up, runnerd launched or attached, steps
// executed, every result awaited, runnerd stopped.
func drive(ctx context.Context, o options, steps []step, tools *toolAnswerer, w *out, stderr io.Writer, log *slog.Logger) error {
	core := control.NewCore(control.Config{
		Identity: o.id, RunnerVersion: o.runnerVersion, RunnerDigest: o.runnerDigest,
		LeaseTTL: o.leaseTTL, Logger: log,
	})
	defer core.Close()
	var ticket string
	if o.mode == "attach" {
		ticket = os.Getenv(ticketEnv)
		if ticket == "" {
			return errors.New(ticketEnv + " is required in attach mode")
		}
		core.Store().AddTicket(ticket, time.Now().Add(o.timeout))
	} else {
		var err error
		if ticket, err = core.MintTicket(); err != nil {
			return err
		}
	}

	printerDone := make(chan struct{})
	pctx, stopPrinter := context.WithCancel(context.Background())
	go func() { defer close(printerDone); printCore(pctx, core, w) }()
	defer func() { stopPrinter(); <-printerDone }()
	answererDone := make(chan struct{})
	actx, stopAnswerer := context.WithCancel(context.Background())
	go func() { defer close(answererDone); tools.run(actx, core, log) }()
	defer func() { stopAnswerer(); <-answererDone }()

	var proc *runnerdProc
	var url string
	// route is this session's connection for a new run (an attach step's
	// "auto"); listenAddr is the listening runnerd's socket.
	var route func(runID string) json.RawMessage
	var listenAddr string
	var dialURL func() string // where redial connects the core (listen and attach modes)
	switch o.mode {
	case "dial":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listen core: %w", err)
		}
		srv := &http.Server{Handler: core, ReadHeaderTimeout: upgradeHeaderWait}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		connect := "ws://" + ln.Addr().String() + prp.ConnectPath(o.id.RunID)
		base := "ws://" + ln.Addr().String()
		route = func(runID string) json.RawMessage {
			return jsonenc.MustMarshal(map[string]string{"mode": "connect", "connectUrl": base + prp.ConnectPath(runID)})
		}
		if proc, err = launch(o, ticket, stderr, "--connect-url", connect); err != nil {
			return err
		}
	case "listen":
		var err error
		proc, err = launch(o, ticket, stderr, "--listen-address", "127.0.0.1", "--listen-port", "0",
			"--listen-path", prp.ConnectPath(o.id.RunID))
		if err != nil {
			return err
		}
		select {
		case addr := <-proc.listening:
			url = "ws://" + addr + prp.ConnectPath(o.id.RunID)
			listenAddr = addr
		case <-proc.exited:
			return &runnerdExitedError{code: proc.code, what: "before listening"}
		case <-time.After(listenWait):
			proc.stop()
			return errors.New("runnerd did not report a listening address")
		}
	case "attach":
		url = o.url
		if u, err := neturl.Parse(o.url); err == nil {
			listenAddr = u.Host
		}
	}
	if listenAddr != "" {
		host, port, _ := net.SplitHostPort(listenAddr)
		portNum, _ := strconv.Atoi(port)
		route = func(runID string) json.RawMessage {
			return jsonenc.MustMarshal(map[string]any{"mode": "listen", "listenAddress": host, "listenPort": portNum, "listenPath": prp.ConnectPath(runID)})
		}
		// A warm rotation moves the listener to the new run's path: dial
		// the run that owns (or is taking over) the registration.
		base := "ws://" + listenAddr
		url = ""
		dialURL = func() string {
			s := core.Snapshot()
			if s.Warm != nil {
				return base + prp.ConnectPath(s.Warm.NewIdentity.RunID)
			}
			return base + prp.ConnectPath(s.Identity.RunID)
		}
	}
	var wg sync.WaitGroup
	dctx, stopDial := context.WithCancel(ctx)
	if dialURL == nil && url != "" {
		dialURL = func() string { return url }
	}
	if dialURL != nil {
		wg.Add(1)
		go func() { defer wg.Done(); redial(dctx, core, dialURL, proc, log) }()
	}
	defer func() { stopDial(); wg.Wait() }()

	// A launched runnerd that exits ends the run at once: no result can
	// arrive any more, and the timeout may be minutes away.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	if proc != nil {
		go func() {
			select {
			case <-proc.exited:
				stopRun(errRunnerdExited)
			case <-runCtx.Done():
			}
		}()
	}
	err := execute(runCtx, core, steps, tools, route)
	var exited *runnerdExitedError
	if errors.As(err, &exited) {
		exited.code = proc.code // set before proc.exited closed
	}
	terminal := slices.ContainsFunc(steps, func(s step) bool {
		return prp.IsTerminalCommand(s.Command) || s.Revoke != 0
	})
	if proc != nil {
		if err != nil || !terminal {
			proc.stop()
		}
		select {
		case <-proc.exited:
		case <-ctx.Done():
			proc.stop()
			<-proc.exited
		}
		w.line(map[string]any{"kind": "runnerd_exit", "code": proc.code})
	}
	return err
}

// execute runs the steps in order, then waits for every result. When ctx
// ends because runnerd exited (its cause errRunnerdExited), the run is over:
// it succeeds only if every command queued so far has its result and no
// step that needs runnerd is left; otherwise it returns a
// *runnerdExitedError saying what was left (the caller knows the status).
func execute(ctx context.Context, core *control.Core, steps []step, tools *toolAnswerer, route func(runID string) json.RawMessage) error {
	var ids []string
	// every command queued so far: the script's and the tool answers'
	all := func() []string { return append(slices.Clone(ids), tools.commandIDs()...) }
	answered := func(s control.Snapshot) bool {
		for _, id := range all() {
			if resultOf(s, id) == nil {
				return false
			}
		}
		return true
	}
	waitAll := func() error { return core.Wait(ctx, answered) }
	afterExit := func(rest []step) error {
		s := core.Snapshot()
		missing := 0
		queued := all()
		for _, id := range queued {
			if resultOf(s, id) == nil {
				missing++
			}
		}
		needsRunnerd := slices.ContainsFunc(rest, func(s step) bool {
			return s.Command != "" || s.Ping || s.Revoke != 0 || s.WaitEvent != "" || s.Resolve != ""
		})
		switch {
		case missing > 0:
			return &runnerdExitedError{what: fmt.Sprintf("before %d of %d commands got a result", missing, len(queued))}
		case needsRunnerd:
			return &runnerdExitedError{what: "before the script ended"}
		}
		return nil
	}
	exited := func() bool { return errors.Is(context.Cause(ctx), errRunnerdExited) }
	waited := map[string]int{}    // waitEvent steps run per event type
	resolved := map[string]bool{} // runtime requests this script answered
	for i, s := range steps {
		var err error
		switch {
		case s.Command != "":
			payload := s.Payload
			if s.autoConnection {
				if route == nil {
					return fmt.Errorf("run script: %w: attach connection \"auto\" needs a route", errScript)
				}
				if payload, err = withConnection(payload, route); err != nil {
					return fmt.Errorf("run script: %w", err)
				}
			}
			var cmd prp.Command
			cmd, err = core.QueueCommand(prp.Command{Schema: commandSchema(s.Command), Type: s.Command, Payload: payload})
			ids = append(ids, cmd.CommandID)
		case s.SleepMs > 0:
			select {
			case <-time.After(time.Duration(s.SleepMs) * time.Millisecond):
			case <-ctx.Done():
				err = ctx.Err()
			}
		case s.Ping:
			err = waitConnected(ctx, core)
			if err == nil {
				err = core.Ping(ctx)
			}
		case s.Revoke != 0:
			err = waitConnected(ctx, core)
			if err == nil {
				err = core.Revoke(s.Revoke)
			}
		case s.Drop:
			core.DropCurrent()
		case s.Wait:
			err = waitAll()
		case s.ToolResults != nil || s.ToolErrors != nil:
			tools.set(s.ToolResults, s.ToolErrors)
		case s.WaitEvent != "":
			waited[s.WaitEvent]++
			n := waited[s.WaitEvent]
			err = core.Wait(ctx, func(snap control.Snapshot) bool { return countEvents(snap, s.WaitEvent) >= n })
		case s.Resolve != "":
			var req committedEvent
			err = core.Wait(ctx, func(snap control.Snapshot) bool {
				var ok bool
				req, ok = openRequest(snap, resolved)
				return ok
			})
			if err == nil {
				resolved[req.Payload.Request.RequestID] = true
				var cmd prp.Command
				cmd, err = core.QueueCommand(prp.Command{Type: prp.CommandRequestResolve, Payload: resolvePayload(req, resolveAction(s.Resolve))})
				ids = append(ids, cmd.CommandID)
			}
		}
		if err != nil && exited() {
			return afterExit(steps[i:]) // a ping or revoke cut short is left undone too
		}
		if err != nil {
			return fmt.Errorf("run script: %w", err)
		}
	}
	if err := waitAll(); err != nil {
		if exited() {
			return afterExit(nil)
		}
		return fmt.Errorf("wait for command results: %w", err)
	}
	return nil
}

// resultOf finds a command's result in the current journal or, after a
// warm rotation, in the archived epoch it belonged to.
func resultOf(s control.Snapshot, commandID string) json.RawMessage {
	if r := s.Results[commandID]; r != nil {
		return r
	}
	for _, e := range s.Epochs {
		if r := e.Results[commandID]; r != nil {
			return r
		}
	}
	return nil
}

func waitConnected(ctx context.Context, core *control.Core) error {
	return core.Wait(ctx, func(s control.Snapshot) bool { return s.Connected })
}

// redial keeps the core connected to a listening runnerd (the server's
// ingress loop, prp.md §6.2), until ctx ends or runnerd exits.
func redial(ctx context.Context, core *control.Core, url func() string, proc *runnerdProc, log *slog.Logger) {
	var exited <-chan struct{}
	if proc != nil {
		exited = proc.exited
	}
	for {
		if err := core.Wait(ctx, func(s control.Snapshot) bool { return !s.Connected }); err != nil {
			return
		}
		select {
		case <-exited:
			return
		default:
		}
		if err := core.Connect(ctx, url()); err != nil && ctx.Err() == nil {
			log.Warn("connect runnerd", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-exited:
			return
		case <-time.After(redialDelay):
		}
	}
}

// printCore prints every committed event and every command result once.
// A warm rotation archives the old identity's journal as an epoch and the
// new identity starts empty: what the old epoch still had unprinted is
// printed first, then the counters restart.
func printCore(ctx context.Context, core *control.Core, w *out) {
	printedEvents, epochs := 0, 0
	printed := map[string]bool{}
	for {
		var s control.Snapshot
		err := core.Wait(ctx, func(snap control.Snapshot) bool {
			s = snap
			return len(snap.Epochs) > epochs || len(snap.Events) > printedEvents || len(snap.Results) > len(printed)
		})
		if err != nil {
			s = core.Snapshot() // stopping: print what arrived since the last change seen
		}
		for ; epochs < len(s.Epochs); epochs++ {
			e := s.Epochs[epochs]
			printBatch(w, core, e.Events, e.Results, &printedEvents, printed)
			printedEvents, printed = 0, map[string]bool{}
		}
		printBatch(w, core, s.Events, s.Results, &printedEvents, printed)
		if err != nil {
			return
		}
	}
}

// printBatch prints the events past *printedEvents and the results not in printed.
// An event that carries outputBody is followed by the body as the core
// reassembled and verified it (printBody).
func printBatch(w *out, core *control.Core, events []json.RawMessage, results map[string]json.RawMessage, printedEvents *int, printed map[string]bool) {
	for _, e := range events[min(*printedEvents, len(events)):] {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		_ = json.Unmarshal(e, &env)
		var ev map[string]any
		_ = json.Unmarshal(env.Payload, &ev)
		ev["kind"] = "event"
		w.line(ev)
		printBody(w, core, env.Payload)
	}
	*printedEvents = max(*printedEvents, len(events))
	var fresh []prp.CommandResultPayload
	for id, raw := range results {
		if printed[id] {
			continue
		}
		printed[id] = true
		var p prp.CommandResultPayload
		_ = json.Unmarshal(raw, &p)
		fresh = append(fresh, p)
	}
	slices.SortFunc(fresh, func(a, b prp.CommandResultPayload) int { return cmp.Compare(a.ControllerSeq, b.ControllerSeq) })
	for _, p := range fresh {
		w.line(map[string]any{"kind": "command_result", "commandId": p.CommandID, "controllerSeq": p.ControllerSeq,
			"commandType": p.CommandType, "status": p.Status, "result": p.Result})
	}
}

// printBody prints, after an event that carries outputBody, one line
// {"kind":"output_body", bodyId, byteLength, sha256, httpStatus} with the
// length and digest of the text the core reassembled from the committed
// chunks, or the server's refusal (httpStatus 404 or 409, its message).
func printBody(w *out, core *control.Core, payload json.RawMessage) {
	var ev struct {
		Payload struct {
			OutputBody *outputbody.Ref `json:"outputBody"`
		} `json:"payload"`
	}
	if json.Unmarshal(payload, &ev) != nil || ev.Payload.OutputBody == nil {
		return
	}
	ref := ev.Payload.OutputBody
	line := map[string]any{"kind": "output_body", "bodyId": ref.BodyID}
	text, err := core.OutputBody(ref.BodyID)
	if err != nil {
		line["httpStatus"], line["error"] = outputbody.Status(err), err.Error()
	} else {
		sum := sha256.Sum256([]byte(text))
		line["httpStatus"], line["byteLength"], line["sha256"] = outputbody.Status(nil), len(text), hex.EncodeToString(sum[:])
	}
	w.line(line)
}

// runnerdProc is one launched runnerd.
type runnerdProc struct {
	cmd       *exec.Cmd
	listening chan string
	exited    chan struct{}
	code      int
}

// launch starts runnerd with the ticket in its environment only (never on
// its command line, prp.md §13).
func launch(o options, ticket string, stderr io.Writer, modeArgs ...string) (*runnerdProc, error) {
	args := append([]string{
		"--state-dir", o.stateDir,
		"--runner-id", o.id.RunnerInstanceID, "--environment-lease-id", o.id.EnvironmentLeaseID,
		"--run-id", o.id.RunID, "--session-id", o.id.NormalizedSessionID,
		"--turn-id", o.id.TurnID, "--item-id", o.id.ItemID,
		"--runner-version", o.runnerVersion, "--runner-digest", o.runnerDigest,
	}, modeArgs...)
	if !slices.Contains(o.runnerdArgs, "--lifecycle-mode") && !slices.ContainsFunc(o.runnerdArgs, isLifecycleFlag) {
		args = append(args, "--lifecycle-mode", "warm", "--idle-timeout-ms", strconv.FormatInt(o.timeout.Milliseconds(), 10))
	}
	args = append(args, o.runnerdArgs...)
	cmd := exec.Command(o.runnerd, args...)
	cmd.Env = append(os.Environ(), ticketEnv+"="+ticket)
	cmd.Stdout = stderr
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("launch runnerd: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launch runnerd: %w", err)
	}
	p := &runnerdProc{cmd: cmd, listening: make(chan string, 1), exited: make(chan struct{})}
	go func() {
		// Forward runnerd's log and pick out its listening address.
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var rec struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "listening" && rec.Address != "" {
				select {
				case p.listening <- rec.Address:
				default:
				}
			}
			_, _ = stderr.Write(append(append([]byte(nil), line...), '\n'))
		}
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM (an orderly runnerd stop, prp.md §13), then SIGKILL
// after stopGrace.
func (p *runnerdProc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
	}
}
