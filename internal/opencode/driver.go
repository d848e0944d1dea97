package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// Kind is the driver kind of an OpenCode binding (the runner's driver
// map).
const Kind = "opencode_server"

// Command is the executable of kind opencode: the descriptor's command
// names the reference's Node facade, so it is ignored (codex.md §6); a
// runnerd flag overrides it at launch.
const Command = "opencode"

// ServeArgs start the server on loopback, any port (codex.md §6).
func ServeArgs() []string {
	return []string{"serve", "--hostname", "127.0.0.1", "--port", "0"}
}

// Record is the driver's durable state (provider.Record.Driver): the
// server's URL, its per-session password (0600 state only, never
// logged) and the translation state that makes recovered output exactly
// once.
type Record struct {
	URL      string `json:"url,omitempty"`
	Password string `json:"password"`
	State    State  `json:"state"`
}

// childEnv makes a session's password and the env entry that hands it
// to the opencode process only.
func childEnv() (string, map[string]string, error) {
	pw, err := newPassword()
	if err != nil {
		return "", nil, err
	}
	return pw, map[string]string{envPassword: pw}, nil
}

// ReadRecord is the driver's record inside c (zero when none).
func ReadRecord(c *provider.Core) Record {
	var r Record
	if raw := c.Live().Driver; len(raw) > 0 {
		_ = json.Unmarshal(raw, &r)
	}
	return r
}

func writeRecord(c *provider.Core, r Record) {
	b, _ := json.Marshal(r)
	c.Live().Driver = b
}

// setPassword records a fresh launch's password (and forgets the
// previous server's URL and state).
func setPassword(c *provider.Core, pw string) {
	writeRecord(c, Record{Password: pw})
}

// Registration is OpenCode's entry in the runner's provider list; the
// runner sets Executable from its --opencode-executable flag.
var Registration = provider.Registration{Kind: "opencode", Driver: Kind, New: NewDriver, Describe: describe,
	Transport: provider.TransportHTTP}

// approvalNever is the only approvalPolicy a descriptor of kind opencode
// may carry, as for Codex (codex.md §1).
const approvalNever = "never"

// describe applies codex.md §6: runnerd speaks OpenCode's server API
// itself, so the descriptor's command and args (the reference's Node
// facade) give way to opencode serve; like Codex it accepts only
// approvalPolicy never and asks nothing.
func describe(s *provider.LaunchSpec) error {
	if s.ApprovalPolicy != nil && *s.ApprovalPolicy != approvalNever {
		return provider.Failed("provider descriptor approvalPolicy must be never for kind opencode")
	}
	s.Agent = "opencode"
	s.Command, s.Args = Command, ServeArgs()
	if s.PermissionMode == "" {
		s.PermissionMode = string(provider.ApproveAll)
	}
	return nil
}

// NewDriver is OpenCode's driver (codex.md §6).
func NewDriver(h provider.Host) provider.Driver {
	return &driver{h: h, listening: make(chan struct{})}
}

// driver drives `opencode serve` (codex.md §6): the process runs under
// pcwrap like every agent, its stdout gives the port, and the session
// runs over its loopback HTTP API; the event stream's output is
// committed through the host's one commit path (Host.Deliver), with the
// translation state in the same write.
type driver struct {
	h provider.Host

	// guarded by the host's lock
	stdout    []byte
	listening chan struct{} // closed once the URL is recorded
	conn      *Conn
	client    *Client
}

func (d *driver) KeepsRunning() bool { return true }

// Feed reads stdout only for the listening line; OpenCode's output is
// its event stream. Host lock held.
func (d *driver) Feed(p []byte) ([]provider.Inbound, error) {
	if d.conn != nil || d.stdout == nil && len(p) == 0 {
		return nil, nil
	}
	select {
	case <-d.listening:
		return nil, nil
	default:
	}
	d.stdout = append(d.stdout, p...)
	if u, _, ok := listenURL(d.stdout); ok {
		r := ReadRecord(d.h.Core())
		r.URL = u
		writeRecord(d.h.Core(), r)
		d.stdout = nil
		close(d.listening)
	} else if len(d.stdout) > maxListenLine {
		d.stdout = d.stdout[len(d.stdout)-maxListenLine/2:]
	}
	return nil, nil
}

// Open waits for the listening line (the cold bound, startTimeout at
// most), creates the OpenCode session and starts the event stream.
func (d *driver) Open(ctx context.Context, o provider.OpenSession) error {
	h := d.h
	ended := h.ProcessEnded()
	if ended == nil {
		return provider.NewFailure(provider.ClassAgentDisconnected, nil)
	}
	t := h.Clock().NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-d.listening:
	case <-ended:
		return provider.NewFailure(provider.ClassAgentStartupExitNonzero, errors.New("opencode server exited before it listened"))
	case <-t.C():
		return provider.ErrDeadline
	case <-ctx.Done():
		return ctx.Err()
	}
	var r Record
	h.WithLock(func() { r = ReadRecord(h.Core()) })
	cl, err := newClient(r.URL, r.Password)
	if err != nil {
		return provider.NewFailure(provider.ClassACPSessionInitFailed, err)
	}
	conn := NewConn(cl, r.State, d.commit)
	sid, err := conn.Open(ctx, "")
	if err != nil {
		cl.Close()
		return provider.NewFailure(provider.ClassACPSessionInitFailed, err)
	}
	h.WithLock(func() {
		h.Core().Live().ACPSessionID = sid
		r.State = conn.state()
		writeRecord(h.Core(), r)
		d.start(cl, conn)
	})
	return nil
}

// Adopt reconnects to the server a previous runnerd started: its URL,
// password and translation state are in the record, so the stream
// reopens and the message list fills in what was missed, deduplicated
// by part id (codex.md §6). Host lock held.
func (d *driver) Adopt() {
	c := d.h.Core()
	r := ReadRecord(c)
	if d.conn != nil || r.URL == "" || c.Record().ACPSessionID == "" {
		return
	}
	cl, err := newClient(r.URL, r.Password)
	if err != nil {
		d.h.Logger().Warn("opencode server unusable after restart", "err", err)
		return
	}
	select {
	case <-d.listening:
	default:
		close(d.listening)
	}
	d.start(cl, NewConn(cl, r.State, d.commit))
}

// start runs conn's event stream until the host stops. Host lock held.
func (d *driver) start(cl *Client, conn *Conn) {
	d.conn, d.client = conn, cl
	log := d.h.Logger()
	d.h.Go(func(ctx context.Context) {
		defer cl.Close()
		if err := conn.run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("opencode event stream ended", "err", err)
		}
	})
}

// commit is the event stream's sink: the messages go through the host's
// shared handling and are committed with the state they leave in one
// durable write.
func (d *driver) commit(st State, in []provider.Inbound) {
	h := d.h
	err := h.Deliver(d, func() {
		r := ReadRecord(h.Core())
		r.State = st
		writeRecord(h.Core(), r)
	}, in)
	if err != nil && !errors.Is(err, provider.ErrWrite) {
		h.Logger().Error("commit opencode events", "err", err)
	}
}

// Prompt marks the turn active; prompt_async is sent once the commit
// that records turn.started is durable (Host.AfterCommit). A refused
// prompt fails the turn. Host lock held.
func (d *driver) Prompt(turnID, text string) (provider.Call, error) {
	h := d.h
	if d.conn == nil {
		return provider.Call{}, provider.ErrNoSession
	}
	w := h.Core().Wire()
	if w.Turn != nil {
		return provider.Call{}, provider.ErrTurnActive
	}
	w.Turn = &provider.TurnState{ID: turnID}
	h.Core().Live().Prompted = true
	pr := Prompt{Text: text}
	if b, ok := h.Binding(); ok {
		if prov, model, ok := strings.Cut(b.Model, "/"); ok {
			pr.ProviderID, pr.ModelID = prov, model
		}
		if instr, err := b.Instructions(); err == nil && instr != nil {
			pr.System = *instr
		}
	}
	conn := d.conn
	log := h.Logger()
	h.AfterCommit(func(ctx context.Context) {
		if err := conn.prompt(ctx, turnID, pr); err != nil {
			log.Warn("opencode prompt refused", "err", err)
			out := provider.TurnOutcome{TurnID: turnID, StopReason: provider.StopEndTurn,
				Err: provider.NewFailure(provider.ClassTurnFailed, errors.New("opencode refused the prompt"))}
			d.commit(conn.state(), []provider.Inbound{{Kind: provider.KindTurnSettled, TurnID: turnID, Outcome: &out, Err: out.Err}})
		}
	})
	return provider.Call{}, nil
}

// Cancel aborts the turn over HTTP; the server keeps running and the
// turn settles from its idle. Host lock held.
func (d *driver) Cancel() ([][]byte, error) {
	w := d.h.Core().Wire()
	if d.conn == nil || w.Turn == nil {
		return nil, provider.ErrNoTurn
	}
	w.Turn.CancelRequested = true
	conn := d.conn
	log := d.h.Logger()
	d.h.Go(func(ctx context.Context) {
		if err := conn.cancel(ctx); err != nil && !errors.Is(err, provider.ErrNoTurn) {
			log.Warn("opencode abort failed", "err", err)
		}
	})
	return nil, nil
}

// HandleRequest takes OpenCode's permission requests into the shared
// permission flow (tools.md §6): the request is recorded pending like an
// ACP one; the session's permission mode answers it at once, or it
// becomes a PRP runtime request that request.resolve answers (through
// Answer). The answer goes back over HTTP. Host lock held.
func (d *driver) HandleRequest(in provider.Inbound) ([]provider.Event, [][]byte, bool) {
	h := d.h
	var id string
	if d.conn == nil || in.Permission == nil || json.Unmarshal(in.ID, &id) != nil {
		return nil, nil, true
	}
	c := h.Core()
	w := c.Wire()
	if w.AgentRequests == nil {
		w.AgentRequests = map[string]provider.AgentRequest{}
	}
	w.AgentRequests[string(in.ID)] = provider.AgentRequest{Method: provider.MethodRequestPermission, TurnID: in.TurnID}
	mode := provider.ApproveAll
	if b, ok := h.Binding(); ok {
		mode = b.PermissionMode
	}
	dec := provider.DecidePermission(mode, *in.Permission)
	if dec == provider.DecideAsk {
		rr, evs := h.Mapper().PermissionRequest(c.Map(), in.TurnID, in.ID, *in.Permission)
		c.SetRuntimeRequest(in.ID, rr.ID, rr.ItemID, rr.Choices)
		return evs, nil, true
	}
	c.ForgetAgentRequest(in.ID)
	d.replyAfterCommit(id, provider.PickOption(*in.Permission, dec == provider.DecideAllow))
	return nil, nil, true
}

// Answer sends request.resolve's answer over HTTP. Host lock held.
func (d *driver) Answer(id json.RawMessage, o provider.PermissionOutcome) {
	var pid string
	if d.conn == nil || json.Unmarshal(id, &pid) != nil {
		return
	}
	d.replyAfterCommit(pid, o)
}

// replyAfterCommit replies once the commit in progress is durable; a
// cancelled outcome rejects.
func (d *driver) replyAfterCommit(id string, o provider.PermissionOutcome) {
	option := ""
	if o.Outcome == "selected" {
		option = o.OptionID
	}
	conn := d.conn
	log := d.h.Logger()
	d.h.AfterCommit(func(ctx context.Context) {
		if err := conn.reply(ctx, id, option); err != nil {
			log.Warn("opencode permission reply failed", "err", err)
		}
	})
}

// Launch makes the session's password, handed to the opencode process
// only, and records it with the launch (provider.Launcher): 0600 state,
// never logged.
func (d *driver) Launch(l *provider.Launch) (func(*provider.Core), error) {
	pw, childEnv, err := childEnv()
	if err != nil {
		return nil, err
	}
	l.ChildEnv = childEnv
	return func(c *provider.Core) { setPassword(c, pw) }, nil
}
