package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/codexapp"
	"github.com/pcrunner/pcrunner/internal/mcpbridge"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

// NewCodexDriver is Codex's app-server driver (codex.md).
func NewCodexDriver(h provider.Host) provider.Driver {
	return &codexDriver{m: managerOf(h), c: codexapp.New(h.Core())}
}

// CodexHomeDir holds the isolated CODEX_HOME of each session under the
// state dir (codex.md §2).
const CodexHomeDir = "codex-home"

// Codex descriptor values (codex.md §1, §3).
const (
	codexApprovalNever = "never"
	codexSandbox       = "danger-full-access"
	// codexInvalidToolCall prefixes a refused item/tool/call answer.
	codexInvalidToolCall = "invalid_tool_call: "
)

// codexDriver is Codex's app-server protocol (codex.md): thread/turn calls
// over the same pcwrap stdio, the same record and the same tool flow.
type codexDriver struct {
	m *Manager
	c *codexapp.Client
}

func (d *codexDriver) KeepsRunning() bool { return true }

func (d *codexDriver) Feed(p []byte) ([]provider.Inbound, error) {
	d.c.Mapper = d.m.mapper
	return d.c.Feed(p)
}

func (d *codexDriver) Prompt(turnID, text string) (provider.Call, error) {
	return d.c.TurnStart(turnID, text)
}

func (d *codexDriver) Cancel() ([][]byte, error) {
	// Open item/tool/call requests get the stop error before turn/interrupt
	// (tools.md §3 item 6): Codex withdraws them (serverRequest/resolved) as
	// soon as it reads the interrupt, and an answer written after that
	// finds no request (the waiter's own answer then fails harmlessly).
	var lines [][]byte
	w := d.m.cl.Wire()
	for _, key := range slices.Sorted(maps.Keys(w.AgentRequests)) {
		if w.AgentRequests[key].Method != codexapp.MethodToolCall {
			continue
		}
		if l, err := d.c.Respond(json.RawMessage(key), codexapp.ToolAnswer(TextStopped, true)); err == nil {
			lines = append(lines, l)
		}
	}
	more, err := d.c.Interrupt()
	if err != nil {
		return nil, err
	}
	return append(lines, more...), nil
}

// Open is initialize, initialized, then thread/start with the catalog as
// dynamicTools, or thread/resume (codex.md §2–§3).
func (d *codexDriver) Open(ctx context.Context, o provider.OpenSession) error {
	m := d.m
	if _, err := o.Call(d.c.Initialize); err != nil {
		return err
	}
	m.mu.Lock()
	line, err := d.c.Initialized()
	if err == nil {
		err = m.commitThenWriteLocked(nil, [][]byte{line})
	}
	tools := m.codexToolsLocked()
	m.mu.Unlock()
	if err != nil {
		return provider.NewFailure(provider.ClassAgentDisconnected, err)
	}
	instr, err := o.Instructions()
	if err != nil {
		m.log.Error("instructions unavailable", "err", err)
		return failed("the run's instructions could not be read")
	}
	var model *string
	if o.Model != "" {
		model = &o.Model
	}
	if o.Resume {
		m.mu.Lock()
		changed := m.st.ThreadCatalogDigest != o.CatalogDigest
		m.mu.Unlock()
		if changed {
			return &CommandError{Code: CodeToolCatalogChanged, Message: "the run's tool catalog differs from the one the Codex thread started with"}
		}
		if _, err = o.Call(func() (provider.Call, error) {
			return d.c.ThreadResume(codexapp.ThreadResumeParams{Cwd: o.Cwd, Model: model, ApprovalPolicy: codexApprovalNever, DeveloperInstructions: instr})
		}); err != nil {
			return err
		}
		_, err = o.Call(d.c.ThreadRead)
		return err
	}
	if _, err = o.Call(func() (provider.Call, error) {
		return d.c.ThreadStart(codexapp.ThreadStartParams{Cwd: o.Cwd, Model: model, ApprovalPolicy: codexApprovalNever,
			DynamicTools: tools, DeveloperInstructions: instr, Sandbox: codexSandbox})
	}); err != nil {
		return err
	}
	m.mu.Lock()
	m.st.ThreadCatalogDigest = o.CatalogDigest // the open's commit records it
	m.mu.Unlock()
	return nil
}

// CodeToolCatalogChanged fails a Codex resume under another catalog.
const CodeToolCatalogChanged = "tool_catalog_changed"

// codexToolsLocked is dynamicTools: the catalog then the reserved tools
// (codex.md §3, tools.md §1, §4). m.mu held.
func (m *Manager) codexToolsLocked() []codexapp.DynamicTool {
	out := []codexapp.DynamicTool{}
	if m.tools.cat == nil {
		return out
	}
	for _, t := range m.tools.cat.Tools() {
		// Codex takes only [A-Za-z0-9_-] names (the Responses API's rule):
		// a dotted operation id goes as its flat name, which the catalog
		// resolves back; one whose flat name is ambiguous cannot be offered.
		name, ok := m.tools.cat.FlatNameOf(t.Name)
		if !ok {
			m.log.Warn("a catalog operation's Codex tool name is ambiguous; it is not offered to Codex", "operationId", t.Name)
			continue
		}
		out = append(out, codexapp.DynamicTool{Type: codexapp.DynamicToolFunction, Name: name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return out
}

func codexInstructions(stateDir string, b *Binding) (*string, error) {
	if b.InstructionsSide == "" {
		return nil, nil
	}
	data, err := state.ReadSide(stateDir, b.InstructionsSide, maxInstructionsSide)
	if err != nil {
		return nil, fmt.Errorf("read instructions: %w", err)
	}
	var in string
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("decode instructions: %w", err)
	}
	if in == "" {
		return nil, nil
	}
	return &in, nil
}

// HandleRequest answers Codex's requests (codex.md §4): item/tool/call
// through the semantic tool flow, anything else -32601. m.mu held.
func (d *codexDriver) HandleRequest(in provider.Inbound) ([]provider.Event, [][]byte, bool) {
	if (in.Method == codexapp.MethodRequestUserInput || isCodexApproval(in.Method)) && d.runtimeRequestsFullLocked() {
		// codex.md §2: at most MaxPendingRuntimeRequests open at once.
		if l, err := d.c.RespondError(in.ID, -32000, "too many pending runtime requests"); err == nil {
			return nil, [][]byte{l}, true
		}
		return nil, nil, true
	}
	if in.Method == codexapp.MethodRequestUserInput {
		return d.questionLocked(in)
	}
	if isCodexApproval(in.Method) {
		return d.approvalLocked(in)
	}
	if in.Method != codexapp.MethodToolCall {
		l, err := d.c.RespondError(in.ID, codexapp.CodeMethodUnavailable, codexapp.TextMethodUnavailable)
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	m := d.m
	if r, ok := m.cl.Wire().AgentRequests[string(in.ID)]; ok && r.ItemID != "" {
		// The same request read again after a restart: it is already
		// linked to its call; wait for it unless that already happens.
		if _, busy := m.tools.waiters[r.ItemID]; busy {
			return nil, nil, true
		}
		return nil, d.rearmOneLocked(string(in.ID), r), true
	}
	var p codexapp.ToolCallParams
	refuse := func(text string) ([]provider.Event, [][]byte, bool) {
		l, err := d.c.Respond(in.ID, codexapp.ToolAnswer(codexInvalidToolCall+text, true))
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	if json.Unmarshal(in.Params, &p) != nil || p.CallID == "" || p.Tool == "" {
		return refuse("the call is malformed")
	}
	t := m.cl.Wire().Turn
	if p.ThreadID != d.c.ThreadID() || t == nil || (t.ProviderTurnID != "" && p.TurnID != t.ProviderTurnID) {
		return refuse("the call names another thread or turn")
	}
	if m.tools.cat == nil {
		return refuse(TextNoTurn)
	}
	if _, ok := m.tools.cat.Resolve(p.Tool); !ok {
		return refuse(mcpbridge.TextUnsupportedTool)
	}
	args := p.Arguments
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	callID, _ := json.Marshal(p.CallID)
	w, res := m.admitCallLocked(mcpbridge.Call{SessionID: "codex:" + p.ThreadID, RequestID: callID, Name: p.Tool, Arguments: args})
	if w == nil {
		if res.Text == TextIdentityConflict {
			return refuse("the callId was reused with other arguments")
		}
		l, err := d.c.Respond(in.ID, codexapp.ToolAnswer(res.Text, res.IsError))
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	id := bytes.Clone(in.ID)
	// The Codex request remembers its call, so a restarted runnerd waits
	// for the result again (rearmLocked): Codex never re-sends it.
	if r, ok := m.cl.Wire().AgentRequests[string(in.ID)]; ok {
		r.ItemID = w.callID
		m.cl.Wire().AgentRequests[string(in.ID)] = r // committed with the event file (handleInbound)
	}
	m.wg.Add(1)
	go d.await(w, id)
	return nil, nil, true
}

// rearmLocked is the hot restart of Codex's open item/tool/call requests
// (acp.md §3.5): the previous life detached every call; each one whose
// Codex request is still open waits for its result again, or is answered
// now from the result recorded meanwhile. It returns the answer lines for
// the caller's commit. m.mu held.
func (d *codexDriver) rearmLocked() [][]byte {
	m := d.m
	var lines [][]byte
	w := m.cl.Wire()
	for _, key := range slices.Sorted(maps.Keys(w.AgentRequests)) {
		r := w.AgentRequests[key]
		if r.Method != codexapp.MethodToolCall || r.ItemID == "" {
			continue
		}
		if _, busy := m.tools.waiters[r.ItemID]; busy {
			continue
		}
		lines = append(lines, d.rearmOneLocked(key, r)...)
	}
	return lines
}

// rearmOneLocked re-arms the Codex request key linked to call r.ItemID.
// m.mu held.
func (d *codexDriver) rearmOneLocked(key string, r provider.AgentRequest) [][]byte {
	m := d.m
	var lines [][]byte
	tb := m.tableLocked()
	{
		c := tb.Find(r.ItemID)
		switch {
		case c == nil:
			if l, err := d.c.Respond(json.RawMessage(key), codexapp.ToolAnswer(TextStopped, true)); err == nil {
				lines = append(lines, l)
			}
		case c.Recorded != nil:
			o := *c.Recorded
			res := m.answerLocked(c, o)
			tb.Settle(c.CallID, o)
			if l, err := d.c.Respond(json.RawMessage(key), codexapp.ToolAnswer(res.Text, res.IsError)); err == nil {
				lines = append(lines, l)
			}
		default:
			c.State = toolcall.Pending
			wt := m.waitLocked(c.CallID)
			m.wg.Add(1)
			go d.await(wt, json.RawMessage(key))
		}
	}
	return lines
}

// await answers Codex once the call's result arrives (or the turn is
// stopped: TextStopped). On runnerd's own stop it gives up: the call
// stays pending in the durable table.
func (d *codexDriver) await(w *toolWaiter, id json.RawMessage) {
	m := d.m
	defer m.wg.Done()
	select {
	case a := <-w.ch:
		m.mu.Lock()
		defer m.mu.Unlock()
		line, err := d.c.Respond(id, codexapp.ToolAnswer(a.res.Text, a.res.IsError))
		if err != nil {
			if a.taken != nil { // Codex withdrew the request: keep the result for a re-call
				m.tableLocked().Restore(a.call, *a.taken)
				_ = m.commitThenWriteLocked(nil, nil)
			}
			return
		}
		if err := m.commitThenWriteLocked(nil, [][]byte{line}); err != nil && !errors.Is(err, provider.ErrWrite) {
			m.log.Error("answer codex tool call", "err", err)
		}
	case <-m.ctx.Done():
	}
}

// codexEnv adds the isolated CODEX_HOME (codex.md §2): <state>/codex-home/
// <session>/ (0700) holding config.toml (the model provider's base URL,
// when allowlisted) and auth.json (the API key), both 0600 and never
// logged.
func codexEnv(stateDir, session string, environ, env []string) ([]string, error) {
	if session == "" {
		session = "default"
	}
	dir := filepath.Join(stateDir, CodexHomeDir, safeName(session))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create codex home: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create codex home: %w", err)
	}
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	var cfg strings.Builder
	if u := vars["OPENAI_BASE_URL"]; u != "" {
		q, _ := json.Marshal(u) // a TOML basic string accepts JSON's escapes
		fmt.Fprintf(&cfg, "model_provider = \"paperclip\"\n\n[model_providers.paperclip]\nname = \"paperclip\"\nbase_url = %s\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n", q)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg.String()), 0o600); err != nil {
		return nil, fmt.Errorf("write codex config: %w", err)
	}
	auth := vars["PAPERCLIP_ACPX_CODEX_AUTH_JSON_SECRET"]
	if auth == "" {
		key := vars["CODEX_API_KEY"]
		if key == "" {
			key = vars["OPENAI_API_KEY"]
		}
		if key != "" {
			b, _ := json.Marshal(map[string]string{"OPENAI_API_KEY": key})
			auth = string(b)
		}
	}
	if auth != "" {
		if err := os.WriteFile(filepath.Join(dir, "auth.json"), []byte(auth), 0o600); err != nil {
			return nil, fmt.Errorf("write codex auth: %w", err)
		}
	}
	return append(env, "CODEX_HOME="+dir), nil
}

// safeName keeps a path element to [A-Za-z0-9._-].
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if s := string(b); s != "" && s != "." && s != ".." {
		return s
	}
	return "x"
}

// codexSession names the session's CODEX_HOME.
func (m *Manager) codexSession() string {
	if c := m.correlation(); c != (toolcall.Correlation{}) {
		return c.NormalizedSessionID
	}
	return ""
}

// steerer is a driver that can steer a running turn (Codex's turn/steer;
// ACP v1 cannot).
type steerer interface {
	Steer(text string) (provider.Call, error)
}

func (d *codexDriver) Steer(text string) (provider.Call, error) { return d.c.Steer(text) }

// SteerTurn is turn.steer (codex.md §3): turn/steer with the active turn's
// id, waiting (bounded) for Codex's answer; a driver that cannot steer
// fails as Steer does.
func (m *Manager) SteerTurn(payload json.RawMessage) (json.RawMessage, error) {
	m.mu.Lock()
	var s steerer
	turn := ""
	if m.cl != nil {
		s, _ = m.driverLocked().(steerer)
		turn = m.cl.ActiveTurn()
	}
	m.mu.Unlock()
	if s == nil {
		return m.Steer() // ACP v1 cannot steer: refused whatever the payload
	}
	var p struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || strings.TrimSpace(p.Text) == "" {
		return nil, failed("turn.steer needs a non-empty text")
	}
	if turn == "" {
		return nil, failed("no turn is active")
	}
	t := m.cfg.Clock.NewTimer(codexapp.RequestTimeout)
	defer t.Stop()
	if _, err := m.call(context.Background(), t.C(), func(*acpx.Client) (provider.Call, error) { return s.Steer(p.Text) }); err != nil {
		if errors.Is(err, errDeadline) {
			return nil, failed("the provider did not answer turn/steer in time")
		}
		return nil, classErr(err)
	}
	return json.Marshal(map[string]any{"status": "steered", "providerTurnId": turn})
}

// reasonProviderResolved closes a runtime request Codex resolved itself.
const reasonProviderResolved = "provider_resolved"

// maxQuestions bounds one question set (question-set.schema.json).
const maxQuestions = 64

// userInputParams is item/tool/requestUserInput (experimental).
type userInputParams struct {
	ThreadID  string `json:"threadId"`
	TurnID    string `json:"turnId"`
	ItemID    string `json:"itemId"`
	Questions []struct {
		ID       string `json:"id"`
		Header   string `json:"header"`
		Question string `json:"question"`
		IsOther  bool   `json:"isOther"`
		IsSecret bool   `json:"isSecret"`
		Options  []struct {
			Label       string `json:"label"`
			Description string `json:"description"`
		} `json:"options"`
	} `json:"questions"`
}

// questionLocked surfaces item/tool/requestUserInput as a
// runtime_request.created of type input carrying a question set
// (codex.md §4). A malformed one gets -32602. m.mu held.
func (d *codexDriver) questionLocked(in provider.Inbound) ([]provider.Event, [][]byte, bool) {
	m := d.m
	var p userInputParams
	if json.Unmarshal(in.Params, &p) != nil || len(p.Questions) == 0 || len(p.Questions) > maxQuestions {
		l, err := d.c.RespondError(in.ID, -32602, "invalid user input request")
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	turn := m.cl.ActiveTurn()
	rrID := safeName(turn + "-question-" + string(in.ID))
	itemID := safeName(turn + "-input-" + p.ItemID)
	qs := []any{}
	var secret []any
	red := m.mapper.Redactor
	for _, q := range p.Questions {
		prompt := red.String(q.Question)
		if prompt == "" {
			prompt = "The agent asks a question"
		}
		mode := "text"
		if len(q.Options) > 0 {
			mode = "single_select"
		}
		opts := []any{}
		for _, o := range q.Options {
			opts = append(opts, map[string]any{"id": red.String(o.Label), "label": red.String(o.Label), "description": red.String(o.Description)})
		}
		qq := map[string]any{"id": red.String(q.ID), "header": red.String(q.Header), "prompt": prompt, "required": true,
			"answerMode": mode, "options": opts}
		if q.IsOther {
			qq["customAnswer"] = map[string]any{"enabled": true}
		}
		if q.IsSecret {
			secret = append(secret, red.String(q.ID))
		}
		qs = append(qs, qq)
	}
	details := map[string]any{"questionSet": map[string]any{"schema": "paperclip.question_set.v1", "questions": qs}}
	if len(secret) > 0 {
		details["secretQuestionIds"] = secret
	}
	request := map[string]any{
		"schema": "paperclip.runtime_request.v1", "requestKind": "runtime", "requestId": rrID, "type": "input",
		"status": "pending", "prompt": "The agent asks for input", "itemId": itemID, "details": details,
		"origin": map[string]any{"adapter": "codex", "provider": "codex", "method": codexapp.MethodRequestUserInput},
	}
	if turn != "" {
		request["turnId"] = turn
	}
	m.cl.SetRuntimeRequest(in.ID, rrID, itemID, nil)
	return []provider.Event{{EventType: "runtime_request.created", Priority: provider.P0, TurnID: turn, ItemID: itemID,
		Payload: map[string]any{"request": request}}}, nil, true
}

// answerQuestionLocked is request.resolve for a Codex question: the
// paperclip.question_response.v1 answers become {answers: {<questionId>:
// {answers: [string]}}} (codex.md §4). Answers are written to Codex only:
// never to state, events or logs. m.mu held.
func (m *Manager) answerQuestionLocked(commandID string, id json.RawMessage, req provider.AgentRequest, payload json.RawMessage) (json.RawMessage, error) {
	var p struct {
		RequestID string `json:"requestId"`
		Response  struct {
			Outcome string `json:"outcome"`
			Answers []struct {
				QuestionID string   `json:"questionId"`
				OptionID   string   `json:"optionId"`
				OptionIDs  []string `json:"optionIds"`
				Value      *string  `json:"value"`
				Text       *string  `json:"text"`
				Values     []string `json:"values"`
			} `json:"answers"`
		} `json:"response"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, failed("request.resolve response is malformed")
	}
	d, ok := m.driverLocked().(*codexDriver)
	if !ok {
		return nil, failed("no agent request is pending under that requestId")
	}
	answers := map[string]any{}
	for _, a := range p.Response.Answers {
		if a.QuestionID == "" {
			return nil, failed("request.resolve answers need a questionId")
		}
		var list []string
		switch {
		case len(a.Values) > 0:
			list = a.Values
		case len(a.OptionIDs) > 0:
			list = a.OptionIDs
		case a.OptionID != "":
			list = []string{a.OptionID}
		case a.Value != nil:
			list = []string{*a.Value}
		case a.Text != nil:
			list = []string{*a.Text}
		}
		answers[a.QuestionID] = map[string]any{"answers": append([]string{}, list...)}
	}
	line, err := d.c.Respond(id, map[string]any{"answers": answers})
	if err != nil {
		return nil, failed("no agent request is pending under that requestId")
	}
	action := "accept"
	if p.Response.Outcome == "cancelled" {
		action = "cancel"
	}
	evs := m.mapper.RequestResolved(provider.RuntimeRequestOf(req), action)
	result, _ := json.Marshal(map[string]any{"status": "delivered", "requestId": p.RequestID})
	if err := m.commitThenWriteEffectLocked(evs, [][]byte{line}, &commandEffect{commandID: commandID, result: result}); err != nil {
		return nil, err
	}
	return result, nil
}

// closeQuestionsLocked ends every open Codex question with status and
// reason. m.mu held.
func (m *Manager) closeQuestionsLocked(status, reason string) []provider.Event {
	var evs []provider.Event
	w := m.cl.Wire()
	for _, key := range slices.Sorted(maps.Keys(w.AgentRequests)) {
		r := w.AgentRequests[key]
		if (r.Method != codexapp.MethodRequestUserInput && !isCodexApproval(r.Method)) || r.RuntimeRequestID == "" {
			continue
		}
		evs = append(evs, m.mapper.RequestClosed(provider.RuntimeRequestOf(r), status, reason)...)
		m.cl.ForgetAgentRequest(json.RawMessage(key))
	}
	return evs
}

// approvalParams is the part of item/commandExecution/requestApproval and
// item/fileChange/requestApproval runnerd reads.
type approvalParams struct {
	ThreadID string  `json:"threadId"`
	TurnID   string  `json:"turnId"`
	ItemID   string  `json:"itemId"`
	Command  *string `json:"command"`
	Reason   *string `json:"reason"`
}

// Codex approval decisions, used as the option ids of the permission
// request the approval is decided as.
const (
	codexAccept           = "accept"
	codexAcceptForSession = "acceptForSession"
	codexDecline          = "decline"
	codexCancel           = "cancel"
)

func isCodexApproval(method string) bool {
	return method == codexapp.MethodCommandApproval || method == codexapp.MethodFileApproval
}

// approvalLocked decides a Codex approval by the bound permission mode
// exactly as an ACP permission request (tools.md §6: acpx.DecidePermission):
// answered at once, or surfaced as runtime_request.created until
// request.resolve. With approvalPolicy never Codex should not ask. m.mu held.
func (d *codexDriver) approvalLocked(in provider.Inbound) ([]provider.Event, [][]byte, bool) {
	m := d.m
	var p approvalParams
	_ = json.Unmarshal(in.Params, &p) // every field is optional here
	title, kind := "Run a command?", "execute"
	if in.Method == codexapp.MethodFileApproval {
		title, kind = "Change files?", "edit"
	}
	if p.Command != nil && *p.Command != "" {
		title = *p.Command
	}
	req := provider.PermissionRequest{SessionID: d.c.ThreadID(),
		ToolCall: provider.PermissionToolCall{ToolCallID: p.ItemID, Title: title, Kind: kind},
		Options: []provider.PermissionOption{
			{OptionID: codexAccept, Name: "Allow", Kind: provider.OptionAllowOnce},
			{OptionID: codexAcceptForSession, Name: "Allow for the session", Kind: provider.OptionAllowAlways},
			{OptionID: codexDecline, Name: "Decline", Kind: provider.OptionRejectOnce},
		}}
	mode := provider.ApproveAll
	if m.st.Binding != nil {
		mode = m.st.Binding.PermissionMode
	}
	if provider.DecidePermission(mode, req) == provider.DecideAsk {
		rr, evs := m.mapper.PermissionRequest(m.cl.Map(), in.TurnID, in.ID, req)
		m.cl.SetRuntimeRequest(in.ID, rr.ID, rr.ItemID, rr.Choices)
		return evs, nil, true
	}
	o := provider.PickOption(req, provider.DecidePermission(mode, req) == provider.DecideAllow)
	l, err := d.c.Respond(in.ID, map[string]any{"decision": codexDecision(o)})
	if err != nil {
		return nil, nil, true
	}
	return nil, [][]byte{l}, true
}

func codexDecision(o provider.PermissionOutcome) string {
	if o.Outcome != "selected" || o.OptionID == "" {
		return codexCancel
	}
	return o.OptionID
}

// respondPermissionLocked answers a pending permission-shaped request with
// outcome o in its own protocol. m.mu held.
func (m *Manager) respondPermissionLocked(id json.RawMessage, req provider.AgentRequest, o provider.PermissionOutcome) ([]byte, error) {
	if d, ok := m.driverLocked().(*codexDriver); ok && isCodexApproval(req.Method) {
		return d.c.Respond(id, map[string]any{"decision": codexDecision(o)})
	}
	return m.cl.Respond(id, acpx.PermissionResponse{Outcome: o})
}

// runtimeRequestsFullLocked reports MaxPendingRuntimeRequests open
// runtime requests. m.mu held.
func (d *codexDriver) runtimeRequestsFullLocked() bool {
	n := 0
	for _, r := range d.m.cl.Wire().AgentRequests {
		if r.RuntimeRequestID != "" {
			n++
		}
	}
	return n >= codexapp.MaxPendingRuntimeRequests
}

// checkCodexTools refuses at run.prepare a catalog whose dynamicTools
// (catalog plus reserved tools) exceed Codex's bounds (codex.md §3: 256
// tools, 4 MiB), rather than failing the later session.open.
func checkCodexTools(cat *catalog.Catalog) error {
	if cat == nil {
		return nil
	}
	tools := cat.Tools()
	if len(tools) > codexapp.MaxDynamicTools {
		return failed(fmt.Sprintf("the tool catalog gives %d dynamic tools; Codex takes at most %d", len(tools), codexapp.MaxDynamicTools))
	}
	b, err := json.Marshal(tools)
	if err != nil || len(b) > codexapp.MaxDynamicToolsBytes {
		return failed("the tool catalog exceeds Codex's 4 MiB dynamicTools bound")
	}
	return nil
}
