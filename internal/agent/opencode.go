package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/opencode"
	"github.com/pcrunner/pcrunner/internal/provider"
)

// NewOpenCodeDriver is OpenCode's server driver (codex.md §6).
func NewOpenCodeDriver(h provider.Host) provider.Driver {
	return &openCodeDriver{m: managerOf(h), listening: make(chan struct{})}
}

// openCodeCommand is the executable of kind opencode: the descriptor's
// command names the reference's Node facade, so it is ignored (codex.md
// §6); Config.OpenCodeExecutable overrides this at launch.
func openCodeCommand(string) string { return "opencode" }

// openCodeServeArgs start the server on loopback, any port (codex.md §6).
func openCodeServeArgs() []string {
	return []string{"serve", "--hostname", "127.0.0.1", "--port", "0"}
}

// openCodeRecord is the driver's durable state (acpx.Record.Driver): the
// server's URL, its per-session password (0600 state only, never
// logged) and the translation state that makes recovered output exactly
// once.
type openCodeRecord struct {
	URL      string         `json:"url,omitempty"`
	Password string         `json:"password"`
	State    opencode.State `json:"state"`
}

// openCodeChildEnv makes a session's password and the env entry that
// hands it to the opencode process only.
func openCodeChildEnv() (string, map[string]string, error) {
	pw, err := opencode.NewPassword()
	if err != nil {
		return "", nil, err
	}
	return pw, map[string]string{opencode.EnvPassword: pw}, nil
}

func readOpenCodeRecord(cl *acpx.Client) openCodeRecord {
	var r openCodeRecord
	if raw := cl.Live().Driver; len(raw) > 0 {
		_ = json.Unmarshal(raw, &r)
	}
	return r
}

func writeOpenCodeRecord(cl *acpx.Client, r openCodeRecord) {
	b, _ := json.Marshal(r)
	cl.Live().Driver = b
}

// setOpenCodePassword records a fresh launch's password (and forgets the
// previous server's URL and state).
func setOpenCodePassword(cl *acpx.Client, pw string) {
	writeOpenCodeRecord(cl, openCodeRecord{Password: pw})
}

// openCodeDriver drives `opencode serve` (codex.md §6): the process runs
// under pcwrap like every agent, its stdout gives the port, and the
// session runs over its loopback HTTP API; the event stream's output is
// committed through the Manager's one commit path, with the translation
// state in the same write.
type openCodeDriver struct {
	m *Manager

	// guarded by m.mu
	stdout    []byte
	listening chan struct{} // closed once the URL is recorded
	conn      *opencode.Conn
	client    *opencode.Client
}

func (d *openCodeDriver) KeepsRunning() bool { return true }

// Feed reads stdout only for the listening line; OpenCode's output is
// its event stream. m.mu held.
func (d *openCodeDriver) Feed(p []byte) ([]provider.Inbound, error) {
	if d.conn != nil || d.stdout == nil && len(p) == 0 {
		return nil, nil
	}
	select {
	case <-d.listening:
		return nil, nil
	default:
	}
	d.stdout = append(d.stdout, p...)
	if u, _, ok := opencode.ListenURL(d.stdout); ok {
		r := readOpenCodeRecord(d.m.cl)
		r.URL = u
		writeOpenCodeRecord(d.m.cl, r)
		d.stdout = nil
		close(d.listening)
	} else if len(d.stdout) > opencode.MaxListenLine {
		d.stdout = d.stdout[len(d.stdout)-opencode.MaxListenLine/2:]
	}
	return nil, nil
}

// Open waits for the listening line (the cold bound, opencode.StartTimeout
// at most), creates the OpenCode session and starts the event stream.
func (d *openCodeDriver) Open(ctx context.Context, o provider.OpenSession) error {
	m := d.m
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return provider.NewFailure(provider.ClassAgentDisconnected, nil)
	}
	t := time.NewTimer(opencode.StartTimeout)
	defer t.Stop()
	select {
	case <-d.listening:
	case <-p.ended:
		return provider.NewFailure(provider.ClassAgentStartupExitNonzero, errors.New("opencode server exited before it listened"))
	case <-t.C:
		return errDeadline
	case <-ctx.Done():
		return ctx.Err()
	}
	m.mu.Lock()
	r := readOpenCodeRecord(m.cl)
	m.mu.Unlock()
	cl, err := opencode.NewClient(r.URL, r.Password)
	if err != nil {
		return provider.NewFailure(provider.ClassACPSessionInitFailed, err)
	}
	conn := opencode.NewConn(cl, r.State, d.commit)
	sid, err := conn.Open(ctx, "")
	if err != nil {
		cl.Close()
		return provider.NewFailure(provider.ClassACPSessionInitFailed, err)
	}
	m.mu.Lock()
	m.cl.Live().ACPSessionID = sid
	r.State = conn.State()
	writeOpenCodeRecord(m.cl, r)
	d.startLocked(cl, conn)
	m.mu.Unlock()
	return nil
}

// adopter is a driver whose provider talks beside the pcwrap stdio and
// must reopen that channel when runnerd re-adopts a live process.
type adopter interface{ adoptLocked() }

// adoptLocked reconnects to the server a previous runnerd started: its
// URL, password and translation state are in the record, so the stream
// reopens and the message list fills in what was missed, deduplicated
// by part id (codex.md §6). m.mu held.
func (d *openCodeDriver) adoptLocked() {
	m := d.m
	r := readOpenCodeRecord(m.cl)
	if d.conn != nil || r.URL == "" || m.cl.Record().ACPSessionID == "" {
		return
	}
	cl, err := opencode.NewClient(r.URL, r.Password)
	if err != nil {
		m.log.Warn("opencode server unusable after restart", "err", err)
		return
	}
	select {
	case <-d.listening:
	default:
		close(d.listening)
	}
	d.startLocked(cl, opencode.NewConn(cl, r.State, d.commit))
}

// startLocked runs conn's event stream until the Manager stops. m.mu held.
func (d *openCodeDriver) startLocked(cl *opencode.Client, conn *opencode.Conn) {
	m := d.m
	d.conn, d.client = conn, cl
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cl.Close()
		if err := conn.Run(m.ctx); err != nil && !errors.Is(err, context.Canceled) {
			m.log.Warn("opencode event stream ended", "err", err)
		}
	}()
}

// commit is the event stream's sink: the messages go through the
// Manager's shared handling and are committed with the state they leave
// in one durable write.
func (d *openCodeDriver) commit(st opencode.State, in []provider.Inbound) {
	m := d.m
	m.mu.Lock()
	var wakes []func()
	defer func() {
		m.mu.Unlock()
		for _, w := range wakes {
			w()
		}
	}()
	p := m.proc
	if p == nil || m.cl == nil || m.driverLocked() != provider.Driver(d) {
		return
	}
	r := readOpenCodeRecord(m.cl)
	r.State = st
	writeOpenCodeRecord(m.cl, r)
	var evs []provider.Event
	var lines [][]byte
	for _, x := range in {
		if x.Kind == provider.KindTurnSettled {
			m.cl.Wire().Turn = nil
		}
		e, l, w := m.handleInbound(p, x)
		evs, lines = append(evs, e...), append(lines, l...)
		if w != nil {
			wakes = append(wakes, w)
		}
	}
	if err := m.commitThenWriteLocked(evs, lines); err != nil && !errors.Is(err, provider.ErrWrite) {
		m.log.Error("commit opencode events", "err", err)
	}
}

// Prompt marks the turn active; prompt_async is sent once the commit
// that records turn.started is durable (the caller holds m.mu until
// then). A refused prompt fails the turn. m.mu held.
func (d *openCodeDriver) Prompt(turnID, text string) (provider.Call, error) {
	m := d.m
	if d.conn == nil {
		return provider.Call{}, provider.ErrNoSession
	}
	w := m.cl.Wire()
	if w.Turn != nil {
		return provider.Call{}, provider.ErrTurnActive
	}
	w.Turn = &provider.TurnState{ID: turnID}
	m.cl.Live().Prompted = true
	pr := opencode.Prompt{Text: text}
	if b := m.st.Binding; b != nil {
		if prov, model, ok := strings.Cut(b.Model, "/"); ok {
			pr.ProviderID, pr.ModelID = prov, model
		}
		if instr, err := codexInstructions(m.cfg.StateDir, b); err == nil && instr != nil {
			pr.System = *instr
		}
	}
	conn := d.conn
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.mu.Lock() // after StartTurn's commit
		m.mu.Unlock()
		if err := conn.Prompt(m.ctx, turnID, pr); err != nil {
			m.log.Warn("opencode prompt refused", "err", err)
			out := provider.TurnOutcome{TurnID: turnID, StopReason: provider.StopEndTurn,
				Err: provider.NewFailure(provider.ClassTurnFailed, errors.New("opencode refused the prompt"))}
			d.commit(conn.State(), []provider.Inbound{{Kind: provider.KindTurnSettled, TurnID: turnID, Outcome: &out, Err: out.Err}})
		}
	}()
	return provider.Call{}, nil
}

// Cancel aborts the turn over HTTP; the server keeps running and the
// turn settles from its idle. m.mu held.
func (d *openCodeDriver) Cancel() ([][]byte, error) {
	m := d.m
	if d.conn == nil || m.cl.Wire().Turn == nil {
		return nil, provider.ErrNoTurn
	}
	m.cl.Wire().Turn.CancelRequested = true
	conn := d.conn
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := conn.Cancel(m.ctx); err != nil && !errors.Is(err, provider.ErrNoTurn) {
			m.log.Warn("opencode abort failed", "err", err)
		}
	}()
	return nil, nil
}

// HandleRequest takes OpenCode's permission requests into the shared
// permission flow (tools.md §6): the request is recorded pending like an
// ACP one; the session's permission mode answers it at once, or it
// becomes a PRP runtime request that request.resolve answers (Resolve
// asks answerLocked). The answer goes back over HTTP. m.mu held.
func (d *openCodeDriver) HandleRequest(in provider.Inbound) ([]provider.Event, [][]byte, bool) {
	m := d.m
	var id string
	if d.conn == nil || in.Permission == nil || json.Unmarshal(in.ID, &id) != nil {
		return nil, nil, true
	}
	w := m.cl.Wire()
	if w.AgentRequests == nil {
		w.AgentRequests = map[string]provider.AgentRequest{}
	}
	w.AgentRequests[string(in.ID)] = provider.AgentRequest{Method: provider.MethodRequestPermission, TurnID: in.TurnID}
	mode := provider.ApproveAll
	if b := m.st.Binding; b != nil {
		mode = b.PermissionMode
	}
	dec := provider.DecidePermission(mode, *in.Permission)
	if dec == provider.DecideAsk {
		evs, _, _ := m.permissionLocked(in)
		return evs, nil, true
	}
	m.cl.ForgetAgentRequest(in.ID)
	d.replyAfterCommitLocked(id, provider.PickOption(*in.Permission, dec == provider.DecideAllow))
	return nil, nil, true
}

// answerer is a driver that answers a resolved runtime request itself
// instead of writing a line to the agent's stdin.
type answerer interface {
	answerLocked(id json.RawMessage, o provider.PermissionOutcome)
}

// answerLocked sends request.resolve's answer over HTTP. m.mu held.
func (d *openCodeDriver) answerLocked(id json.RawMessage, o provider.PermissionOutcome) {
	var pid string
	if d.conn == nil || json.Unmarshal(id, &pid) != nil {
		return
	}
	d.replyAfterCommitLocked(pid, o)
}

// replyAfterCommitLocked replies once the commit in progress (the caller
// holds m.mu through it) is durable; a cancelled outcome rejects.
func (d *openCodeDriver) replyAfterCommitLocked(id string, o provider.PermissionOutcome) {
	m := d.m
	option := ""
	if o.Outcome == "selected" {
		option = o.OptionID
	}
	conn := d.conn
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.mu.Lock()
		m.mu.Unlock()
		if err := conn.Reply(m.ctx, id, option); err != nil {
			m.log.Warn("opencode permission reply failed", "err", err)
		}
	}()
}
