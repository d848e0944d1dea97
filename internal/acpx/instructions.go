package acpx

import "slices"

// systemPromptIgnored are the agents found not to honour session/new's
// _meta.systemPrompt (tools.md §5): test/realagents sends instructions to
// each pinned real agent and looks for them in the requests its
// model receives. Only Claude's adapter (claude-agent-acp 0.73.0, and
// @zed-industries' 0.23.1) passes them on; codex-acp (1.6.2, and
// @zed-industries' 0.16.0), Gemini CLI 0.61.0 (--acp), OpenCode 1.18.33
// (acp) and pi-acp 0.0.23 drop them. Agents not tested are left out, so
// they get no diagnostic they may not deserve.
var systemPromptIgnored = []string{"codex", "gemini", "opencode", "pi"}

// IgnoresSystemPrompt reports whether agent is known to drop the run's
// instructions sent as _meta.systemPrompt, so that session.open can say so
// (harness.diagnostic instructions_unsupported) instead of prepending them
// to the prompt.
func IgnoresSystemPrompt(agent string) bool { return slices.Contains(systemPromptIgnored, agent) }
