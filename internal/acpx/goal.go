package acpx

import (
	"encoding/json"
	"fmt"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// goalControlParams is the _session/goal request.
type goalControlParams struct {
	SessionID string `json:"sessionId"`
	Action    string `json:"action"`
	Objective string `json:"objective,omitempty"`
}

// GoalControl encodes _session/goal. The caller checked the capability.
func (c *Client) GoalControl(action, objective string) (provider.Call, error) {
	if c.Live().ACPSessionID == "" {
		return provider.Call{}, fmt.Errorf("goal control: %w", provider.ErrNoSession)
	}
	return c.Request(provider.MethodSessionGoal, goalControlParams{SessionID: c.Live().ACPSessionID, Action: action, Objective: objective}, "")
}

// applyGoalCapability records what initialize advertised; a resumed
// session reads it again from the new process.
func (c *Client) applyGoalCapability(meta json.RawMessage) {
	capab := provider.DecodeGoalCapability(meta)
	if capab == nil && c.Live().Goal == nil {
		return
	}
	if c.Live().Goal == nil {
		c.Live().Goal = &provider.GoalRecord{}
	}
	c.Live().Goal.Capability = capab
}
