package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/codexapp"
	"github.com/pcrunner/pcrunner/internal/mcpbridge"
	"github.com/pcrunner/pcrunner/internal/state"
	"github.com/pcrunner/pcrunner/internal/toolcall"
)

func init() {
	drivers[DriverCodex] = func(m *Manager) Driver { return &codexDriver{m: m, c: codexapp.New(m.cl)} }
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

func (d *codexDriver) Feed(p []byte) ([]acpx.Inbound, error) {
	d.c.Mapper = d.m.mapper
	return d.c.Feed(p)
}

func (d *codexDriver) Prompt(turnID, text string) (acpx.Call, error) {
	return d.c.TurnStart(turnID, text)
}

func (d *codexDriver) Cancel() ([][]byte, error) { return d.c.Interrupt() }

// Open is initialize, initialized, then thread/start with the catalog as
// dynamicTools, or thread/resume (codex.md §2–§3).
func (d *codexDriver) Open(ctx context.Context, o OpenSession) error {
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
		return acpx.NewFailure(acpx.ClassAgentDisconnected, err)
	}
	b := o.Binding
	instr, err := codexInstructions(m.cfg.StateDir, b)
	if err != nil {
		m.log.Error("instructions unavailable", "err", err)
		return failed("the run's instructions could not be read")
	}
	var model *string
	if b.Model != "" {
		model = &b.Model
	}
	if o.Resume {
		_, err = o.Call(func() (acpx.Call, error) {
			return d.c.ThreadResume(codexapp.ThreadResumeParams{Cwd: b.Cwd, Model: model, ApprovalPolicy: codexApprovalNever, DeveloperInstructions: instr})
		})
		return err
	}
	_, err = o.Call(func() (acpx.Call, error) {
		return d.c.ThreadStart(codexapp.ThreadStartParams{Cwd: b.Cwd, Model: model, ApprovalPolicy: codexApprovalNever,
			DynamicTools: tools, DeveloperInstructions: instr, Sandbox: codexSandbox})
	})
	return err
}

// codexToolsLocked is dynamicTools: the catalog then the reserved tools
// (codex.md §3, tools.md §1, §4). m.mu held.
func (m *Manager) codexToolsLocked() []codexapp.DynamicTool {
	out := []codexapp.DynamicTool{}
	if m.tools.cat == nil {
		return out
	}
	for _, t := range m.tools.cat.Tools() {
		out = append(out, codexapp.DynamicTool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
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
func (d *codexDriver) HandleRequest(in acpx.Inbound) ([]acpx.Event, [][]byte, bool) {
	if in.Method != codexapp.MethodToolCall {
		l, err := d.c.RespondError(in.ID, codexapp.CodeMethodUnavailable, codexapp.TextMethodUnavailable)
		if err != nil {
			return nil, nil, true
		}
		return nil, [][]byte{l}, true
	}
	m := d.m
	var p codexapp.ToolCallParams
	refuse := func(text string) ([]acpx.Event, [][]byte, bool) {
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
	m.wg.Add(1)
	go d.await(w, id)
	return nil, nil, true
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
		if err := m.commitThenWriteLocked(nil, [][]byte{line}); err != nil && !errors.Is(err, acpx.ErrWrite) {
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
