package codexapp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/mcpbridge"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// Kind is the driver kind of a Codex binding (the runner's driver map).
const Kind = "codex_app_server"

// Registration is Codex's entry in the runner's provider list.
var Registration = provider.Registration{Kind: "codex", Driver: Kind, New: NewDriver, Describe: describe}

// describe applies codex.md §1: the reference accepts only approvalPolicy
// never; the agent is codex, its command codex app-server unless the
// descriptor names one, and it asks nothing, so approve-all.
func describe(s *provider.LaunchSpec) error {
	if s.ApprovalPolicy != nil && *s.ApprovalPolicy != ApprovalNever {
		return provider.Failed("provider descriptor approvalPolicy must be never for kind codex")
	}
	s.Agent = "codex"
	if s.Command == "" {
		s.Command, s.Args = "codex", []string{"app-server"}
	}
	if s.PermissionMode == "" {
		s.PermissionMode = string(provider.ApproveAll)
	}
	return nil
}

// NewDriver is Codex's app-server driver (codex.md).
func NewDriver(h provider.Host) provider.Driver {
	return &driver{h: h}
}

// homeDir holds the isolated CODEX_HOME of each session under the
// state dir (codex.md §2).
const homeDir = "codex-home"

// Codex descriptor values (codex.md §1, §3).
const (
	// ApprovalNever is the only approvalPolicy runnerd runs Codex with.
	ApprovalNever = "never"
	codexSandbox  = "danger-full-access"
	// codexInvalidToolCall prefixes a refused item/tool/call answer.
	codexInvalidToolCall = "invalid_tool_call: "
)

// driver is Codex's app-server protocol (codex.md): thread/turn calls
// over the same pcwrap stdio, the same record and the same tool flow as
// ACP, all reached through the host.
type driver struct {
	h  provider.Host
	cc *Client
}

// client is the app-server client over the host's Core, made at first
// use: a driver made only to shape a launch has no session yet.
func (d *driver) client() *Client {
	if d.cc == nil {
		d.cc = New(d.h.Core())
	}
	return d.cc
}

func (d *driver) KeepsRunning() bool { return true }

func (d *driver) Feed(p []byte) ([]provider.Inbound, error) {
	d.client().Mapper = d.h.Mapper()
	return d.client().feed(p)
}

func (d *driver) Prompt(turnID, text string) (provider.Call, error) {
	return d.client().turnStart(turnID, text)
}

func (d *driver) Cancel() ([][]byte, error) {
	// Open item/tool/call requests get the stop error before turn/interrupt
	// (tools.md §3 item 6): Codex withdraws them (serverRequest/resolved) as
	// soon as it reads the interrupt, and an answer written after that
	// finds no request (the waiter's own answer then fails harmlessly).
	var lines [][]byte
	w := d.h.Core().Wire()
	for _, key := range slices.Sorted(maps.Keys(w.AgentRequests)) {
		if w.AgentRequests[key].Method != methodToolCall {
			continue
		}
		if l, err := d.client().respond(json.RawMessage(key), toolAnswer(provider.TextStopped, true)); err == nil {
			lines = append(lines, l)
		}
	}
	more, err := d.client().interrupt()
	if err != nil {
		return nil, err
	}
	return append(lines, more...), nil
}

// Open is initialize, initialized, then thread/start with the catalog as
// dynamicTools, or thread/resume (codex.md §2–§3).
func (d *driver) Open(ctx context.Context, o provider.OpenSession) error {
	h := d.h
	if _, err := o.Call(d.client().initialize); err != nil {
		return err
	}
	var err error
	var tools []dynamicTool
	h.WithLock(func() {
		var line []byte
		line, err = d.client().initialized()
		if err == nil {
			err = h.CommitLocked(nil, [][]byte{line})
		}
		tools = d.toolsLocked()
	})
	if err != nil {
		return provider.NewFailure(provider.ClassAgentDisconnected, err)
	}
	instr, err := o.Instructions()
	if err != nil {
		h.Logger().Error("instructions unavailable", "err", err)
		return provider.Failed("the run's instructions could not be read")
	}
	var model *string
	if o.Model != "" {
		model = &o.Model
	}
	if o.Resume {
		var changed bool
		h.WithLock(func() { changed = h.ThreadCatalogDigest() != o.CatalogDigest })
		if changed {
			return &provider.CommandError{Code: CodeToolCatalogChanged, Message: "the run's tool catalog differs from the one the Codex thread started with"}
		}
		if _, err = o.Call(func() (provider.Call, error) {
			return d.client().threadResume(threadResumeParams{Cwd: o.Cwd, Model: model, ApprovalPolicy: ApprovalNever, DeveloperInstructions: instr})
		}); err != nil {
			return err
		}
		_, err = o.Call(d.client().threadRead)
		return err
	}
	if _, err = o.Call(func() (provider.Call, error) {
		return d.client().threadStart(threadStartParams{Cwd: o.Cwd, Model: model, ApprovalPolicy: ApprovalNever,
			DynamicTools: tools, DeveloperInstructions: instr, Sandbox: codexSandbox})
	}); err != nil {
		return err
	}
	h.WithLock(func() { h.SetThreadCatalogDigest(o.CatalogDigest) }) // the open's commit records it
	return nil
}

// CodeToolCatalogChanged fails a Codex resume under another catalog.
const CodeToolCatalogChanged = "tool_catalog_changed"

// toolsLocked is dynamicTools: the catalog then the reserved tools
// (codex.md §3, tools.md §1, §4). Host lock held.
func (d *driver) toolsLocked() []dynamicTool {
	out := []dynamicTool{}
	cat := d.h.Catalog()
	if cat == nil {
		return out
	}
	for _, t := range cat.Tools() {
		// Codex takes only [A-Za-z0-9_-] names (the Responses API's rule):
		// a dotted operation id goes as its flat name, which the catalog
		// resolves back; one whose flat name is ambiguous cannot be offered.
		name, ok := cat.FlatNameOf(t.Name)
		if !ok {
			d.h.Logger().Warn("a catalog operation's Codex tool name is ambiguous; it is not offered to Codex", "operationId", t.Name)
			continue
		}
		out = append(out, dynamicTool{Type: dynamicToolFunction, Name: name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return out
}

// HandleRequest answers Codex's requests (codex.md §4): item/tool/call
// through the semantic tool flow, anything else -32601. Host lock held.
func (d *driver) HandleRequest(in provider.Inbound) ([]provider.Event, [][]byte, bool) {
	if (in.Method == methodRequestUserInput || isApproval(in.Method)) && d.runtimeRequestsFullLocked() {
		// codex.md §2: at most maxPendingRuntimeRequests open at once.
		if l, err := d.client().respondError(in.ID, -32000, "too many pending runtime requests"); err == nil {
			return nil, [][]byte{l}, true
		}
		return nil, nil, true
	}
	if in.Method == methodRequestUserInput {
		return d.questionLocked(in)
	}
	if isApproval(in.Method) {
		return d.approvalLocked(in)
	}
	if in.Method != methodToolCall {
		l, err := d.client().respondError(in.ID, codeMethodUnavailable, textMethodUnavailable)
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	h := d.h
	if r, ok := h.Core().Wire().AgentRequests[string(in.ID)]; ok && r.ItemID != "" {
		// The same request read again after a restart: it is already
		// linked to its call; wait for it unless that already happens.
		if h.ToolWaiting(r.ItemID) {
			return nil, nil, true
		}
		return nil, d.rearmOneLocked(string(in.ID), r), true
	}
	var p toolCallParams
	refuse := func(text string) ([]provider.Event, [][]byte, bool) {
		l, err := d.client().respond(in.ID, toolAnswer(codexInvalidToolCall+text, true))
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	if json.Unmarshal(in.Params, &p) != nil || p.CallID == "" || p.Tool == "" {
		return refuse("the call is malformed")
	}
	t := h.Core().Wire().Turn
	if p.ThreadID != d.client().threadID() || t == nil || (t.ProviderTurnID != "" && p.TurnID != t.ProviderTurnID) {
		return refuse("the call names another thread or turn")
	}
	cat := h.Catalog()
	if cat == nil {
		return refuse(provider.TextNoTurn)
	}
	if _, ok := cat.Resolve(p.Tool); !ok {
		return refuse(mcpbridge.TextUnsupportedTool)
	}
	args := p.Arguments
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	callID, _ := json.Marshal(p.CallID)
	w, res := h.AdmitCall(mcpbridge.Call{SessionID: "codex:" + p.ThreadID, RequestID: callID, Name: p.Tool, Arguments: args})
	if w == nil {
		if res.Text == provider.TextIdentityConflict {
			return refuse("the callId was reused with other arguments")
		}
		l, err := d.client().respond(in.ID, toolAnswer(res.Text, res.IsError))
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	id := bytes.Clone(in.ID)
	// The Codex request remembers its call, so a restarted runnerd waits
	// for the result again (rearmLocked): Codex never re-sends it.
	if r, ok := h.Core().Wire().AgentRequests[string(in.ID)]; ok {
		r.ItemID = w.CallID()
		h.Core().Wire().AgentRequests[string(in.ID)] = r // committed with the event file (handleInbound)
	}
	d.await(w, id)
	return nil, nil, true
}

// rearmLocked is the hot restart of Codex's open item/tool/call requests
// (acp.md §3.5): the previous life detached every call; each one whose
// Codex request is still open waits for its result again, or is answered
// now from the result recorded meanwhile. It returns the answer lines for
// the caller's commit. Host lock held.
func (d *driver) Rearm() [][]byte {
	var lines [][]byte
	w := d.h.Core().Wire()
	for _, key := range slices.Sorted(maps.Keys(w.AgentRequests)) {
		r := w.AgentRequests[key]
		if r.Method != methodToolCall || r.ItemID == "" {
			continue
		}
		if d.h.ToolWaiting(r.ItemID) {
			continue
		}
		lines = append(lines, d.rearmOneLocked(key, r)...)
	}
	return lines
}

// rearmOneLocked re-arms the Codex request key linked to call r.ItemID.
// Host lock held.
func (d *driver) rearmOneLocked(key string, r provider.AgentRequest) [][]byte {
	var lines [][]byte
	w, res := d.h.RearmCall(r.ItemID)
	switch {
	case w == nil && res == nil:
		if l, err := d.client().respond(json.RawMessage(key), toolAnswer(provider.TextStopped, true)); err == nil {
			lines = append(lines, l)
		}
	case res != nil:
		if l, err := d.client().respond(json.RawMessage(key), toolAnswer(res.Text, res.IsError)); err == nil {
			lines = append(lines, l)
		}
	default:
		d.await(w, json.RawMessage(key))
	}
	return lines
}

// await answers Codex once the call's result arrives (or the turn is
// stopped: textStopped). On runnerd's own stop it gives up: the call
// stays pending in the durable table.
func (d *driver) await(w provider.ToolWait, id json.RawMessage) {
	d.h.AwaitCall(w, func(res mcpbridge.Result) ([]byte, error) {
		return d.client().respond(id, toolAnswer(res.Text, res.IsError))
	})
}

// Env adds the isolated CODEX_HOME (codex.md §2): <state>/codex-home/
// <session>/ (0700) holding config.toml (the model provider's base URL,
// when allowlisted) and auth.json (the API key), both 0600 and never
// logged.
func Env(stateDir, session string, environ, env []string) ([]string, error) {
	if session == "" {
		session = "default"
	}
	dir := filepath.Join(stateDir, homeDir, safeName(session))
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

// Steer is turn/steer of the active turn (provider.Steerer).
func (d *driver) Steer(text string) (provider.Call, error) { return d.client().steer(text) }

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
// (codex.md §4). A malformed one gets -32602. Host lock held.
func (d *driver) questionLocked(in provider.Inbound) ([]provider.Event, [][]byte, bool) {
	c := d.h.Core()
	var p userInputParams
	if json.Unmarshal(in.Params, &p) != nil || len(p.Questions) == 0 || len(p.Questions) > maxQuestions {
		l, err := d.client().respondError(in.ID, -32602, "invalid user input request")
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	turn := c.ActiveTurn()
	rrID := safeName(turn + "-question-" + string(in.ID))
	itemID := safeName(turn + "-input-" + p.ItemID)
	qs := []any{}
	var secret []any
	red := d.h.Mapper().Redactor
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
		"origin": map[string]any{"adapter": "codex", "provider": "codex", "method": methodRequestUserInput},
	}
	if turn != "" {
		request["turnId"] = turn
	}
	c.SetRuntimeRequest(in.ID, rrID, itemID, nil)
	return []provider.Event{{EventType: prp.EventRuntimeRequestCreated, Priority: provider.P0, TurnID: turn, ItemID: itemID,
		Payload: map[string]any{"request": request}}}, nil, true
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

// isApproval reports whether method is one of Codex's approval requests.
func isApproval(method string) bool {
	return method == methodCommandApproval || method == methodFileApproval
}

// approvalLocked decides a Codex approval by the bound permission mode
// exactly as an ACP permission request (tools.md §6: provider.DecidePermission):
// answered at once, or surfaced as runtime_request.created until
// request.resolve. With approvalPolicy never Codex should not ask. Host
// lock held.
func (d *driver) approvalLocked(in provider.Inbound) ([]provider.Event, [][]byte, bool) {
	h := d.h
	var p approvalParams
	_ = json.Unmarshal(in.Params, &p) // every field is optional here
	title, kind := "Run a command?", "execute"
	if in.Method == methodFileApproval {
		title, kind = "Change files?", "edit"
	}
	if p.Command != nil && *p.Command != "" {
		title = *p.Command
	}
	req := provider.PermissionRequest{SessionID: d.client().threadID(),
		ToolCall: provider.PermissionToolCall{ToolCallID: p.ItemID, Title: title, Kind: kind},
		Options: []provider.PermissionOption{
			{OptionID: codexAccept, Name: "Allow", Kind: provider.OptionAllowOnce},
			{OptionID: codexAcceptForSession, Name: "Allow for the session", Kind: provider.OptionAllowAlways},
			{OptionID: codexDecline, Name: "Decline", Kind: provider.OptionRejectOnce},
		}}
	mode := provider.ApproveAll
	if b, ok := h.Binding(); ok {
		mode = b.PermissionMode
	}
	if provider.DecidePermission(mode, req) == provider.DecideAsk {
		rr, evs := h.Mapper().PermissionRequest(h.Core().Map(), in.TurnID, in.ID, req)
		h.Core().SetRuntimeRequest(in.ID, rr.ID, rr.ItemID, rr.Choices)
		return evs, nil, true
	}
	o := provider.PickOption(req, provider.DecidePermission(mode, req) == provider.DecideAllow)
	l, err := d.client().respond(in.ID, map[string]any{"decision": codexDecision(o)})
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

// runtimeRequestsFullLocked reports maxPendingRuntimeRequests open
// runtime requests. Host lock held.
func (d *driver) runtimeRequestsFullLocked() bool {
	n := 0
	for _, r := range d.h.Core().Wire().AgentRequests {
		if r.RuntimeRequestID != "" {
			n++
		}
	}
	return n >= maxPendingRuntimeRequests
}

// AnswerQuestion answers the pending item/tool/requestUserInput id with
// answers (provider.QuestionAnswerer). Host lock held.
func (d *driver) AnswerQuestion(id json.RawMessage, answers map[string]any) ([]byte, error) {
	return d.client().respond(id, map[string]any{"answers": answers})
}

// RespondPermission answers a pending Codex approval with o's decision
// (provider.PermissionResponder); ok is false for any other request.
// Host lock held.
func (d *driver) RespondPermission(id json.RawMessage, req provider.AgentRequest, o provider.PermissionOutcome) (line []byte, ok bool, err error) {
	if !isApproval(req.Method) {
		return nil, false, nil
	}
	line, err = d.client().respond(id, map[string]any{"decision": codexDecision(o)})
	return line, true, err
}

// IsQuestion is true for item/tool/requestUserInput
// (provider.QuestionAnswerer).
func (d *driver) IsQuestion(method string) bool { return method == methodRequestUserInput }

// OwnsRuntimeRequest is true for questions and approvals
// (provider.RuntimeRequester).
func (d *driver) OwnsRuntimeRequest(method string) bool {
	return method == methodRequestUserInput || isApproval(method)
}

// Launch adds the isolated CODEX_HOME to the agent's environment
// (provider.Launcher).
func (d *driver) Launch(l *provider.Launch) (func(*provider.Core), error) {
	env, err := Env(l.StateDir, l.Session, l.Environ, l.Env)
	if err != nil {
		d.h.Logger().Error("codex home unavailable", "err", err)
		return nil, err
	}
	l.Env = env
	return nil, nil
}

// CheckCatalog refuses at run.prepare a catalog whose dynamicTools
// (catalog plus reserved tools) exceed Codex's bounds (codex.md §3: 256
// tools, 4 MiB), rather than failing the later session.open
// (provider.CatalogChecker).
func (d *driver) CheckCatalog(cat *catalog.Catalog) error {
	if cat == nil {
		return nil
	}
	tools := cat.Tools()
	if len(tools) > maxDynamicTools {
		return provider.Failed(fmt.Sprintf("the tool catalog gives %d dynamic tools; Codex takes at most %d", len(tools), maxDynamicTools))
	}
	b, err := json.Marshal(tools)
	if err != nil || len(b) > maxDynamicToolsBytes {
		return provider.Failed("the tool catalog exceeds Codex's 4 MiB dynamicTools bound")
	}
	return nil
}

// EventNames are the adapter and driver Codex's PRP events name
// (codex.md §5; provider.EventNamer).
func (d *driver) EventNames() (adapter, driver string) { return "codex", Kind }

// SteerBound bounds the wait for turn/steer's answer (provider.Steerer).
func (d *driver) SteerBound() time.Duration { return requestTimeout }
