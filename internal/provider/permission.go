package provider

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// PermissionMode is the descriptor's permissionMode (acp.md §2.2, tools.md
// §6).
type PermissionMode string

// Permission modes; approve-all is the default.
const (
	ApproveAll PermissionMode = "approve-all"
	// ApprovePaperclip allows a call of a Paperclip bridge tool at once and
	// makes every other request a runtime request (tools.md §6; the
	// server's default for agents).
	ApprovePaperclip PermissionMode = "approve-paperclip"
	// ApproveReads allows a tool call of kind read, search or fetch at once
	// and makes every other request a runtime request (tools.md §6 replaces
	// acp.md §2.2's "reject anything else").
	ApproveReads PermissionMode = "approve-reads"
	DenyAll      PermissionMode = "deny-all"
	// Manual (beyond acp.md §2.2) answers nothing by policy: every request
	// stays pending as a runtime_request until request.resolve or a cancel.
	Manual PermissionMode = "manual"
)

// ParsePermissionMode accepts the modes above; "" means approve-all.
func ParsePermissionMode(s string) (PermissionMode, error) {
	switch PermissionMode(s) {
	case "":
		return ApproveAll, nil
	case ApproveAll, ApprovePaperclip, ApproveReads, DenyAll, Manual:
		return PermissionMode(s), nil
	}
	return "", fmt.Errorf("parse permission mode: unknown mode %s", quote.Text(s))
}

// Decision is what a permission mode does with one request.
type Decision int

// Decisions.
const (
	// DecideAllow answers at once with an allow option, no PRP event.
	DecideAllow Decision = iota + 1
	// DecideReject answers at once with a reject option, no PRP event.
	DecideReject
	// DecideAsk surfaces the request as a runtime request (tools.md §7).
	DecideAsk
)

// Bridge tool names (tools.md §6): Claude names an MCP tool
// mcp__<server>__<tool>; other agents use <server>__<tool> or
// <server>.<tool>. The bridge server is named "paperclip".
var bridgeToolPrefixes = []string{"mcp__paperclip__", "paperclip__", "paperclip."}

// Reserved result tools (tools.md §4): allowed at once in every mode, so a
// run can always report its result.
const (
	finishTool = "paperclip_finish"
	blockTool  = "paperclip_block"
)

// readKinds are the ACP tool kinds approve-reads allows at once.
var readKinds = map[string]bool{"read": true, "search": true, "fetch": true}

// toolName is the tool a permission request is about: the Claude adapter's
// _meta.claudeCode.toolName (on the request or its toolCall), else the
// tool call's title.
func (r PermissionRequest) toolName() string {
	for _, m := range []json.RawMessage{r.Meta, r.ToolCall.Meta} {
		var meta struct {
			ClaudeCode struct {
				ToolName string `json:"toolName"`
			} `json:"claudeCode"`
		}
		if len(m) > 0 && json.Unmarshal(m, &meta) == nil && meta.ClaudeCode.ToolName != "" {
			return meta.ClaudeCode.ToolName
		}
	}
	return r.ToolCall.Title
}

// bridgeTool returns the bridge tool a name calls (the part after the
// prefix), or ok=false.
func bridgeTool(name string) (string, bool) {
	for _, p := range bridgeToolPrefixes {
		if rest, ok := strings.CutPrefix(name, p); ok && rest != "" {
			return rest, true
		}
	}
	return "", false
}

// isReservedTool reports whether a permission request is for
// paperclip_finish or paperclip_block, bare or with a bridge prefix.
func (r PermissionRequest) isReservedTool() bool {
	name := r.toolName()
	if t, ok := bridgeTool(name); ok {
		name = t
	}
	return name == finishTool || name == blockTool
}

// isBridgeTool reports whether a permission request is for a Paperclip
// bridge tool (tools.md §6).
func (r PermissionRequest) isBridgeTool() bool {
	_, ok := bridgeTool(r.toolName())
	return ok || r.isReservedTool()
}

// DecidePermission applies tools.md §6's table: the reserved tools are
// allowed in every mode (deny-all included); approve-all allows and
// deny-all rejects without a PRP event; approve-paperclip allows a bridge
// tool, approve-reads a read/search/fetch tool call, and both make anything
// else a runtime request; manual makes everything a runtime request.
func DecidePermission(mode PermissionMode, req PermissionRequest) Decision {
	if req.isReservedTool() {
		return DecideAllow
	}
	switch mode {
	case DenyAll:
		return DecideReject
	case ApprovePaperclip:
		if req.isBridgeTool() {
			return DecideAllow
		}
		return DecideAsk
	case ApproveReads:
		if readKinds[req.ToolCall.Kind] {
			return DecideAllow
		}
		return DecideAsk
	case Manual:
		return DecideAsk
	}
	return DecideAllow
}

// PickOption is the answer of an immediate decision: allow picks the first
// allow_once (else allow_always), reject the first reject_once (else
// reject_always); no matching option yields {outcome:"cancelled"}.
func PickOption(req PermissionRequest, allow bool) PermissionOutcome {
	kinds := []string{OptionRejectOnce, OptionRejectAlways}
	if allow {
		kinds = []string{OptionAllowOnce, OptionAllowAlways}
	}
	for _, k := range kinds {
		for _, o := range req.Options {
			if o.Kind == k && o.OptionID != "" {
				return PermissionOutcome{Outcome: "selected", OptionID: o.OptionID}
			}
		}
	}
	return PermissionOutcome{Outcome: "cancelled"}
}

// ChoosePermission is the automatic answer of the modes that answer
// without asking (test agents and peers use it as their policy): deny-all
// rejects, approve-reads allows only a read tool call and rejects
// otherwise, every other mode allows; the reserved tools are always
// allowed.
func ChoosePermission(mode PermissionMode, req PermissionRequest) PermissionOutcome {
	allow := true
	switch {
	case req.isReservedTool():
	case mode == DenyAll:
		allow = false
	case mode == ApproveReads:
		allow = req.ToolCall.Kind == "read"
	}
	return PickOption(req, allow)
}

// Runtime request actions (tools.md §6, §7): what request.resolve may
// choose, each mapped to one ACP option kind (cancel to
// {outcome:"cancelled"}). reject_always is never offered.
const (
	ActionAccept           = "accept"
	actionAcceptForSession = "accept_for_session"
	ActionDecline          = "decline"
	ActionCancel           = "cancel"
)

// actionKinds maps an action to the ACP option kind it picks.
var actionKinds = map[string]string{
	ActionAccept:           OptionAllowOnce,
	actionAcceptForSession: OptionAllowAlways,
	ActionDecline:          OptionRejectOnce,
}

// actionLabels are the fixed choice labels (never peer text).
var actionLabels = map[string]string{
	ActionAccept:           "Accept",
	actionAcceptForSession: "Accept for this session",
	ActionDecline:          "Decline",
	ActionCancel:           "Cancel",
}

// actionOrder is the order choices are listed in.
var actionOrder = []string{ActionAccept, actionAcceptForSession, ActionDecline, ActionCancel}

// requestChoices maps each action the request offers to the ACP option id
// it selects: accept when an allow_once option is offered,
// accept_for_session when allow_always is, decline when reject_once is,
// and cancel always (its id is ""). So there are 1–4 choices.
func requestChoices(req PermissionRequest) map[string]string {
	out := map[string]string{ActionCancel: ""}
	for _, a := range actionOrder {
		k, ok := actionKinds[a]
		if !ok {
			continue
		}
		for _, o := range req.Options {
			if o.Kind == k && o.OptionID != "" {
				out[a] = o.OptionID
				break
			}
		}
	}
	return out
}

// ActionOutcome is the ACP answer of a chosen action, given the action →
// option id map of requestChoices; ok=false when the action was not
// offered.
func ActionOutcome(choices map[string]string, action string) (PermissionOutcome, bool) {
	id, ok := choices[action]
	if !ok {
		return PermissionOutcome{}, false
	}
	if action == ActionCancel {
		return PermissionOutcome{Outcome: "cancelled"}, true
	}
	return PermissionOutcome{Outcome: "selected", OptionID: id}, true
}

// ActionOf names the action an ACP answer amounts to, for a resolution
// given as a raw response (an option id or cancelled).
func ActionOf(choices map[string]string, o PermissionOutcome) string {
	if o.Outcome != "selected" {
		return ActionCancel
	}
	for _, a := range actionOrder {
		if id, ok := choices[a]; ok && a != ActionCancel && id == o.OptionID {
			return a
		}
	}
	return ActionDecline // an option not offered as a choice (reject_always) declines
}
