package agent

import (
	"encoding/json"
	"slices"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/jsonenc"
	"github.com/pcrunner/pcrunner/internal/state"
)

// CodeWarmAttachIncompatible is run.attach's refusal when the live
// provider session cannot serve the new run: the descriptor,
// the catalog digest, the instructions or the model differ. The live agent cannot take a new catalog or new
// instructions, so nothing else could make it serve them.
const CodeWarmAttachIncompatible = "warm_attach_incompatible"

// WarmReady reports whether the provider session can be handed to a new
// run as it stands (session.snapshot's warmAttachReady): a live
// agent with an open ACP session, no active turn, no pending agent
// request (runtime_request) and no unsettled semantic tool call. The
// outbox half is the runner's.
func (m *Manager) WarmReady() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.warmReadyLocked()
}

func (m *Manager) warmReadyLocked() bool {
	if m.cl == nil || m.proc == nil || m.proc.lost || m.cl.Record().ACPSessionID == "" {
		return false
	}
	if m.cl.ActiveTurn() != "" || m.ws.settling != "" || len(m.cl.PendingPermissions()) != 0 {
		return false
	}
	return m.st.Tools == nil || !m.st.Tools.Open()
}

// WarmCompatible checks a run.attach payload against the bound run:
// the same provider descriptor (agent, command, args, cwd,
// permission mode, provider version), the same catalogDigest, the same
// instructions (compared by content address, as Binding.InstructionsSide
// names them) and the same model. Quiescence is WarmReady's. It writes
// nothing. The refusal is a CommandError with
// CodeWarmAttachIncompatible, marked Rejected: the attach had no effect.
func (m *Manager) WarmCompatible(payload json.RawMessage) error {
	refuse := func(msg string) error {
		return &CommandError{Code: CodeWarmAttachIncompatible, Message: msg, Rejected: true}
	}
	next, err := parseDescriptor(payload, m.cfg.Drivers)
	if err != nil {
		return refuse("run.attach provider descriptor is not usable")
	}
	rc, err := parseRunContext(payload)
	if err != nil {
		return refuse("run.attach instructions or runtime context are not usable")
	}
	instructions := ""
	if rc.instructions != "" {
		data, err := jsonenc.Marshal(rc.instructions)
		if err != nil {
			return refuse("run.attach instructions cannot be encoded")
		}
		instructions = state.SideName(data)
	}
	digest, err := attachCatalogDigest(payload)
	if err != nil {
		return refuse("run.attach authorizedTools is not a valid catalog")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.st.Binding
	switch {
	case cur == nil:
		return refuse("no provider is bound")
	case next.Agent != cur.Agent || next.Command != cur.Command || !slices.Equal(next.Args, cur.Args) ||
		next.Cwd != cur.Cwd || next.PermissionMode != cur.PermissionMode || next.ProviderVersion != cur.ProviderVersion ||
		next.NoClientFS != cur.NoClientFS:
		return refuse("run.attach provider descriptor differs from the live session's")
	case digest != cur.CatalogDigest:
		return refuse("run.attach catalogDigest differs from the live session's")
	case instructions != cur.InstructionsSide:
		return refuse("run.attach instructions differ from the live session's")
	case next.Model != cur.Model:
		return refuse("run.attach model differs from the live session's")
	}
	return nil
}

// attachCatalogDigest is the catalogDigest of a payload's authorizedTools
// ("" without one), parsed as run.prepare parses it.
func attachCatalogDigest(payload json.RawMessage) (string, error) {
	var p struct {
		AuthorizedTools json.RawMessage `json:"authorizedTools"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return "", err
	}
	if len(p.AuthorizedTools) == 0 || string(p.AuthorizedTools) == "null" {
		return "", nil
	}
	cat, err := catalog.Parse(p.AuthorizedTools)
	if err != nil {
		return "", err
	}
	return cat.Digest(), nil
}
