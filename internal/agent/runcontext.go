package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/pcrunner/pcrunner/internal/acpx"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/state"
)

// Bounds of the run context run.prepare fixes (tools.md §5).
const (
	// maxInstructionsBytes bounds the descriptor's instructions (tools.md
	// §5: ≤ 1 MiB).
	maxInstructionsBytes = 1 << 20
	// maxInstructionsSide bounds the side file holding them: the JSON
	// string of maxInstructionsBytes, every byte escaped as \u00XX at worst.
	maxInstructionsSide = 6*maxInstructionsBytes + 2
	// maxModelLen is the descriptor model's maxLength
	// (provider-descriptor.schema.json).
	maxModelLen = 240
	// maxRuntimeContextBytes bounds runtimeContext (beyond: the spec names
	// no bound; it holds references, digests and a prompt, far below this,
	// and a bound keeps one command from filling the state directory).
	maxRuntimeContextBytes = 4 << 20
)

// runContext is the part of run.prepare's descriptor that reaches the
// agent's session rather than its launch (tools.md §5).
type runContext struct {
	instructions   string
	runtimeContext json.RawMessage // nil when absent or null
}

// parseRunContext reads and checks provider.instructions and
// provider.runtimeContext (prp.md §7.6). Errors are fixed texts safe for a
// command result: they never quote the instructions.
func parseRunContext(payload json.RawMessage) (runContext, error) {
	var p struct {
		Provider struct {
			Instructions   *string         `json:"instructions"`
			RuntimeContext json.RawMessage `json:"runtimeContext"`
		} `json:"provider"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return runContext{}, failed("run.prepare payload is malformed: instructions must be a string and runtimeContext an object")
	}
	var rc runContext
	if in := p.Provider.Instructions; in != nil {
		switch {
		case len(*in) > maxInstructionsBytes:
			return runContext{}, failed(fmt.Sprintf("provider descriptor instructions are larger than %d bytes", maxInstructionsBytes))
		case strings.IndexByte(*in, 0) >= 0:
			return runContext{}, failed("provider descriptor instructions contain a NUL character")
		case !utf8.ValidString(*in):
			return runContext{}, failed("provider descriptor instructions are not valid UTF-8")
		}
		rc.instructions = *in
	}
	raw := bytes.TrimSpace(p.Provider.RuntimeContext)
	if len(raw) == 0 || string(raw) == "null" {
		return rc, nil
	}
	if len(raw) > maxRuntimeContextBytes {
		return runContext{}, failed(fmt.Sprintf("provider descriptor runtimeContext is larger than %d bytes", maxRuntimeContextBytes))
	}
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return runContext{}, failed("provider descriptor runtimeContext is not an object")
	}
	if mcp, ok := obj["mcp"]; ok {
		obj["mcp"] = scrubSecrets(mcp)
	}
	b, err := jsonenc.Marshal(obj)
	if err != nil {
		return runContext{}, failed("provider descriptor runtimeContext cannot be encoded")
	}
	rc.runtimeContext = b
	return rc, nil
}

// Secret-looking parts of runtimeContext.mcp (tools.md §5: never any
// secret inside mcp on disk). Decision: drop them and keep the rest, so a
// server that sends a header or an env entry does not fail the run; the
// dropped values never reach the side file.
var (
	// secretMembers are members dropped whole: a server's headers and env
	// carry its credentials.
	secretMembers = map[string]bool{"headers": true, "env": true, "authorization": true, "cookie": true,
		"credential": true, "credentials": true, "privatekey": true}
	// secretSuffixes drop a member whose name ends with one of them
	// (compared lower-case without '-' and '_').
	secretSuffixes = []string{"token", "secret", "password", "passwd", "apikey", "key", "auth", "bearer"}
	// credentialShape is a string that looks like a credential wherever it
	// sits (the shapes state and acpx redact, prp.md §8.1).
	credentialShape = regexp.MustCompile(`(?i:bearer)\s+\S{8,}|sk-(?:ant-)?[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----`)
)

func secretMember(k string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(k))
	if secretMembers[n] {
		return true
	}
	for _, s := range secretSuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// scrubSecrets returns v without secret-looking members, strings shaped
// like credentials, and the userinfo and query of URLs.
func scrubSecrets(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if secretMember(k) {
				continue
			}
			if s, ok := e.(string); ok && credentialShape.MatchString(s) {
				continue
			}
			out[k] = scrubSecrets(e)
		}
		return out
	case []any:
		out := make([]any, 0, len(t))
		for _, e := range t {
			if s, ok := e.(string); ok && credentialShape.MatchString(s) {
				continue
			}
			out = append(out, scrubSecrets(e))
		}
		return out
	case string:
		if u, err := url.Parse(t); err == nil && u.Scheme != "" && u.Host != "" && (u.User != nil || u.RawQuery != "") {
			u.User, u.RawQuery = nil, ""
			return u.String()
		}
		return t
	}
	return v
}

// storeRunContext writes the instructions and the runtime context as
// side files and names them in b (tools.md §1 storage, §5).
func storeRunContext(stateDir string, b *Binding, rc runContext) error {
	if rc.instructions != "" {
		data, err := jsonenc.Marshal(rc.instructions)
		if err != nil {
			return failed("provider descriptor instructions cannot be encoded")
		}
		if b.InstructionsSide, err = state.WriteSide(stateDir, data); err != nil {
			return fmt.Errorf("store instructions: %w", err)
		}
	}
	if rc.runtimeContext != nil {
		name, err := state.WriteSide(stateDir, rc.runtimeContext)
		if err != nil {
			return fmt.Errorf("store runtime context: %w", err)
		}
		b.RuntimeContextSide = name
	}
	return nil
}

// parseModel checks provider.model: a string or null, at most maxModelLen
// bytes, no control character.
func parseModel(m *string) (string, error) {
	if m == nil {
		return "", nil
	}
	if len(*m) > maxModelLen {
		return "", failed(fmt.Sprintf("provider descriptor model is longer than %d characters", maxModelLen))
	}
	for _, r := range *m {
		if r < 0x20 || r == 0x7f {
			return "", failed("provider descriptor model contains a control character")
		}
	}
	return *m, nil
}

// sessionMeta is the _meta of session/new, load and resume (tools.md §5):
// {systemPrompt: {append: instructions}, claudeCode: {options: {model}}},
// each key only when set; nil when neither is. The instructions are read
// from their side file at open time (they never enter the state record).
func sessionMeta(stateDir string, b *Binding) (json.RawMessage, error) {
	meta := map[string]any{}
	if b.InstructionsSide != "" {
		data, err := state.ReadSide(stateDir, b.InstructionsSide, maxInstructionsSide)
		if err != nil {
			return nil, fmt.Errorf("read instructions: %w", err)
		}
		var in string
		if err := json.Unmarshal(data, &in); err != nil {
			return nil, fmt.Errorf("decode instructions: %w", err)
		}
		if in != "" {
			meta["systemPrompt"] = map[string]any{"append": in}
		}
	}
	if b.Model != "" {
		meta["claudeCode"] = map[string]any{"options": map[string]any{"model": b.Model}}
	}
	if len(meta) == 0 {
		return nil, nil
	}
	return jsonenc.Marshal(meta)
}

// diagInstructionsUnsupported is session.open's harness.diagnostic code
// for a run with instructions whose agent is known not to honour
// _meta.systemPrompt (tools.md §5).
const diagInstructionsUnsupported = "instructions_unsupported"

// instructionsDiagnostics is what session.open adds for a binding with
// instructions and an agent that drops them (acpx.IgnoresSystemPrompt):
// the instructions are never prepended to the prompt instead.
func instructionsDiagnostics(b *Binding) []provider.Event {
	if b == nil || b.InstructionsSide == "" || !acpx.IgnoresSystemPrompt(b.Agent) {
		return nil
	}
	return []provider.Event{{EventType: prp.EventHarnessDiagnostic, Priority: provider.P1,
		Payload: map[string]any{"code": diagInstructionsUnsupported,
			"message": "the agent does not honour _meta.systemPrompt; the run's instructions do not reach its model"}}}
}

// modelEnv sets the model the acp.md §2.2 way, at spawn: ANTHROPIC_MODEL
// for claude (any inherited value replaced). Codex's CODEX_CONFIG content
// is an open question (acp.md §10 question 2) and other agents take the
// model through _meta only.
func modelEnv(agent, model string, env []string) []string {
	if model == "" || agent != "claude" {
		return env
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ANTHROPIC_MODEL=") {
			out = append(out, kv)
		}
	}
	return append(out, "ANTHROPIC_MODEL="+model)
}
