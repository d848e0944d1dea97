package acpx

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/sharedtest"
)

const schemaBase = "https://paperclip.dev/schemas/prp/v1/"

// missingSchemas are referenced by event.schema.json but not shipped in the
// reference copy; none of them governs an event this package emits, so an
// open schema stands in for each.
var missingSchemas = []string{"workspace-diff", "workspace-file-reference", "semantic-tool", "question-response"}

// safePathPattern is the one reference pattern Go's RE2 cannot compile (it
// uses lookahead): relative, and no ".." segment.
const safePathPattern = `^(?!/)(?!.*(?:^|/)\.\.(?:/|$)).*$`

type safePathRegexp struct{}

func (safePathRegexp) MatchString(s string) bool {
	if strings.HasPrefix(s, "/") {
		return false
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == ".." {
			return false
		}
	}
	return true
}
func (safePathRegexp) String() string { return safePathPattern }

func regexpEngine(s string) (jsonschema.Regexp, error) {
	if s == safePathPattern {
		return safePathRegexp{}, nil
	}
	return regexp.Compile(s)
}

type schemas struct {
	event, usage, request *jsonschema.Schema
}

var (
	schemaOnce sync.Once
	schemaSet  *schemas
	schemaErr  error
)

// loadSchemas compiles the reference PRP schemas read in place from the
// share (skipping when it is absent).
func loadSchemas(t *testing.T) *schemas {
	t.Helper()
	dir := sharedtest.Path(t, "reference", "paperclip-protocol", "schemas")
	schemaOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.UseRegexpEngine(regexpEngine)
		entries, err := os.ReadDir(dir)
		if err != nil {
			schemaErr = err
			return
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".schema.json") {
				continue
			}
			f, err := os.Open(filepath.Join(dir, e.Name()))
			if err != nil {
				schemaErr = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(f)
			f.Close()
			if err != nil {
				schemaErr = fmt.Errorf("%s: %w", e.Name(), err)
				return
			}
			if err := c.AddResource(schemaBase+e.Name(), doc); err != nil {
				schemaErr = err
				return
			}
		}
		for _, m := range missingSchemas {
			if err := c.AddResource(schemaBase+m+".schema.json", map[string]any{"type": "object"}); err != nil {
				schemaErr = err
				return
			}
		}
		s := &schemas{}
		for _, x := range []struct {
			dst  **jsonschema.Schema
			name string
		}{{&s.event, "event"}, {&s.usage, "usage"}, {&s.request, "request"}} {
			if *x.dst, err = c.Compile(schemaBase + x.name + ".schema.json"); err != nil {
				schemaErr = err
				return
			}
		}
		schemaSet = s
	})
	require.NoError(t, schemaErr)
	return schemaSet
}

// envelope wraps an event description the way runnerd's outbox will.
func envelope(seq int, ev Event) map[string]any {
	env := map[string]any{
		"schema":              "paperclip.prp.event.v1",
		"sourceEventId":       fmt.Sprintf("event_runner-1_%016d", seq),
		"sourceSeq":           seq,
		"sourceInstanceId":    "runner-1",
		"sourceKind":          "runner",
		"runId":               "run-1",
		"normalizedSessionId": "session-1",
		"eventType":           ev.EventType,
		"schemaVersion":       1,
		"priority":            ev.Priority,
		"emittedAt":           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Format(time.RFC3339Nano),
		"payload":             ev.Payload,
	}
	if ev.TurnID != "" {
		env["turnId"] = ev.TurnID
	}
	if ev.ItemID != "" {
		env["itemId"] = ev.ItemID
	}
	return env
}

func asInstance(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	require.NoError(t, err)
	return inst
}

// requireValidEvents validates every event against event.schema.json and
// the finer schemas for usage receipts and runtime requests.
func requireValidEvents(t *testing.T, evs []Event) {
	t.Helper()
	s := loadSchemas(t)
	for i, ev := range evs {
		require.NoError(t, s.event.Validate(asInstance(t, envelope(i+1, ev))), "event %d %s", i, ev.EventType)
		switch ev.EventType {
		case "usage.reported":
			require.NoError(t, s.usage.Validate(asInstance(t, ev.Payload)), "usage payload %d", i)
		case "runtime_request.created":
			require.NoError(t, s.request.Validate(asInstance(t, ev.Payload["request"])), "request payload %d", i)
		}
	}
}

// TestSchemaValidatorRejects proves the validator is live: a bad terminal
// payload and a bad tool target fail.
func TestSchemaValidatorRejects(t *testing.T) {
	s := loadSchemas(t)
	bad := Event{EventType: "run.terminal", Priority: P0, Payload: map[string]any{"schema": "paperclip.prp.terminal.v1", "turnTerminalState": "done"}}
	require.Error(t, s.event.Validate(asInstance(t, envelope(1, bad))))
	it := &ItemState{ItemID: "t-item-1", Operation: "read", Target: "/etc/passwd"}
	badTool := Event{EventType: "tool.execution.started", Priority: P1, Payload: Mapper{}.toolPayload(it, "running", "", false)}
	require.Error(t, s.event.Validate(asInstance(t, envelope(1, badTool))))
}
