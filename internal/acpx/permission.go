package acpx

import "fmt"

// PermissionMode is the descriptor's permissionMode (acp.md §2.2).
type PermissionMode string

// Permission modes; approve-all is the default.
const (
	ApproveAll   PermissionMode = "approve-all"
	ApproveReads PermissionMode = "approve-reads"
	DenyAll      PermissionMode = "deny-all"
	// Manual (beyond acp.md §2.2) answers nothing by policy: the request
	// stays pending as a runtime_request until request.resolve or a cancel.
	Manual PermissionMode = "manual"
)

// ParsePermissionMode accepts the three modes; "" means approve-all.
func ParsePermissionMode(s string) (PermissionMode, error) {
	switch PermissionMode(s) {
	case "":
		return ApproveAll, nil
	case ApproveAll, ApproveReads, DenyAll, Manual:
		return PermissionMode(s), nil
	}
	return "", fmt.Errorf("parse permission mode: unknown mode %q", s)
}

// ChoosePermission answers a permission request by policy: approve-all picks
// the first allow_once (else allow_always); approve-reads does so only for
// a read tool call and rejects otherwise; deny-all (and a rejection) picks
// the first reject_once (else reject_always). No matching option yields
// {outcome:"cancelled"}.
func ChoosePermission(mode PermissionMode, req PermissionRequest) PermissionOutcome {
	allow := true
	switch mode {
	case DenyAll:
		allow = false
	case ApproveReads:
		allow = req.ToolCall.Kind == "read"
	}
	kinds := []string{OptionRejectOnce, OptionRejectAlways}
	if allow {
		kinds = []string{OptionAllowOnce, OptionAllowAlways}
	}
	for _, k := range kinds {
		for _, o := range req.Options {
			if o.Kind == k {
				return PermissionOutcome{Outcome: "selected", OptionID: o.OptionID}
			}
		}
	}
	return PermissionOutcome{Outcome: "cancelled"}
}
