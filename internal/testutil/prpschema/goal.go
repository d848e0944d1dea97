package prpschema

// The share lacks prp/v2/session-goal.schema.json, which the v2 event
// schema refers to for session.goal.* and session.capabilities.updated.
// runnerd emits those events, so besides the v2 event
// schema (which sees an open stand-in), tests validate the payloads and
// results against the fields required of the
// paperclip.session_goal.snapshot.v1 projection: one missing a field, or
// carrying one more, fails.

// goalFieldsID names the field-list schema (not a reference schema).
const goalFieldsID = "https://pcrunner.invalid/schemas/session-goal-fields.schema.json"

// goalFields is the projection, its sessionGoals capability block and its
// goal snapshot, as required.
var goalFields = map[string]any{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"$id":     goalFieldsID,
	"type":    "object", "additionalProperties": false,
	"required": []any{"schema", "sessionGoals", "goal", "workingNow", "revision"},
	"properties": map[string]any{
		"schema":       map[string]any{"const": "paperclip.session_goal.snapshot.v1"},
		"sessionGoals": map[string]any{"$ref": "#/$defs/capability"},
		"goal":         map[string]any{"oneOf": []any{map[string]any{"$ref": "#/$defs/snapshot"}, map[string]any{"type": "null"}}},
		"workingNow":   map[string]any{"type": "boolean"},
		"revision":     map[string]any{"type": "integer", "minimum": 0},
		"requestId":    map[string]any{"type": "string", "minLength": 1, "maxLength": 160},
	},
	"$defs": map[string]any{
		"capability": map[string]any{
			"type": "object", "additionalProperties": false,
			"required": []any{"availability", "actions", "autonomousUpdates", "persistentAcrossResume",
				"maxObjectiveChars", "tokenBudgetControl", "usageReporting"},
			"properties": map[string]any{
				"availability": map[string]any{"enum": []any{"available", "unsupported"}},
				"actions": map[string]any{"type": "array", "uniqueItems": true,
					"items": map[string]any{"enum": []any{"set", "pause", "resume", "clear"}}},
				"autonomousUpdates":      map[string]any{"type": "boolean"},
				"persistentAcrossResume": map[string]any{"type": "boolean"},
				"maxObjectiveChars":      map[string]any{"type": "integer", "minimum": 1},
				"tokenBudgetControl":     map[string]any{"type": "boolean"},
				"usageReporting":         map[string]any{"type": "boolean"},
				"reasonCode":             map[string]any{"type": "string", "minLength": 1},
				"reason":                 map[string]any{"type": "string", "minLength": 1},
			},
		},
		"snapshot": map[string]any{
			"type": "object", "additionalProperties": false,
			"required": []any{"objective", "status", "tokenBudget", "tokensUsed", "elapsedSeconds", "iterations",
				"lastReason", "createdAt", "updatedAt", "completedAt", "workingNow"},
			"properties": map[string]any{
				"objective":      map[string]any{"type": "string", "minLength": 1, "maxLength": 4000},
				"status":         map[string]any{"enum": []any{"active", "paused", "blocked", "limited", "complete"}},
				"tokenBudget":    map[string]any{"type": []any{"integer", "null"}, "minimum": 1},
				"tokensUsed":     map[string]any{"type": []any{"integer", "null"}, "minimum": 0},
				"elapsedSeconds": map[string]any{"type": []any{"number", "null"}, "minimum": 0},
				"iterations":     map[string]any{"type": []any{"integer", "null"}, "minimum": 0},
				"lastReason":     map[string]any{"type": []any{"string", "null"}},
				"createdAt":      nullableDate,
				"updatedAt":      nullableDate,
				"completedAt":    nullableDate,
				"workingNow":     map[string]any{"type": "boolean"},
			},
		},
		"capabilitiesEvent": map[string]any{
			"type": "object", "additionalProperties": false,
			"required": []any{"sessionGoals", "turnControls"},
			"properties": map[string]any{
				"sessionGoals": map[string]any{"$ref": "#/$defs/capability"},
				"turnControls": map[string]any{
					"type": "object", "additionalProperties": false, "required": []any{"steering", "queuedFollowUp"},
					"properties": map[string]any{
						"steering": map[string]any{"type": "boolean"}, "queuedFollowUp": map[string]any{"type": "boolean"},
					},
				},
			},
		},
	},
}

var nullableDate = map[string]any{"oneOf": []any{
	map[string]any{"type": "string", "format": "date-time"}, map[string]any{"type": "null"},
}}

// sessionGoalSchema is the reference schema the share lacks.
const sessionGoalSchema = "prp/v2/session-goal"
