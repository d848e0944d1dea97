// Package prpschema compiles the reference PRP JSON schemas, read in place
// from the steering share, for tests that check what runnerd emits.
//
// The server validates every event payload against these schemas (prp.md
// §8.4), so each package that builds events validates them the same way.
// Tests skip with a clear message when the share is absent.
package prpschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcrunner/pcrunner/internal/testutil/sharedtest"
)

const base = "https://paperclip.dev/schemas/"

// missing are schemas the reference event schemas refer to but the share
// does not hold. None governs an event runnerd emits, so an open schema
// (with the $defs the references point into) stands in for each.
var missing = []string{
	"prp/v1/semantic-tool", "prp/v1/workspace-diff", "prp/v1/workspace-file-reference",
	"prp/v1/question-response", "prp/v2/session-goal",
}

// Set holds the compiled schemas tests validate against.
type Set struct {
	EventV1, EventV2, Usage, Request *jsonschema.Schema
	// GoalProjection is the session goal projection (a session.goal.*
	// result and event payload) and GoalCapabilities the payload of
	// session.capabilities.updated, from the required field list (goal.go):
	// the share has no schema for them.
	GoalProjection, GoalCapabilities *jsonschema.Schema
	// GoalSchemaMissing reports that the share lacks the reference
	// session-goal schema, so the field list stands in for it.
	GoalSchemaMissing bool
}

// eventSchemaV2 is the schema field of an event payload built for a v2
// lease (an output.body.chunk, a session goal event).
const eventSchemaV2 = "paperclip.prp.event.v2"

// Event is the event schema a payload names: EventV2 for a v2 event,
// EventV1 otherwise (and for a payload that is not an object).
func (s *Set) Event(payload any) *jsonschema.Schema {
	var head struct {
		Schema string `json:"schema"`
	}
	b, ok := payload.(json.RawMessage)
	if !ok {
		b, _ = json.Marshal(payload)
	}
	if json.Unmarshal(b, &head) == nil && head.Schema == eventSchemaV2 {
		return s.EventV2
	}
	return s.EventV1
}

var (
	once   sync.Once
	loaded *Set
	err    error
)

// Load compiles the schemas once per test process, or skips tb when the
// share is absent.
func Load(tb testing.TB) *Set {
	tb.Helper()
	dir := sharedtest.Path(tb, "reference", "paperclip-protocol", "schemas")
	once.Do(func() { loaded, err = compile(dir) })
	if err != nil {
		tb.Fatalf("compile reference schemas: %v", err)
	}
	return loaded
}

func compile(dir string) (*Set, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseRegexpEngine(regexpEngine)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".schema.json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		id, _ := doc.(map[string]any)["$id"].(string)
		if id == "" {
			return nil, fmt.Errorf("%s: no $id", e.Name())
		}
		if err := c.AddResource(id, doc); err != nil {
			return nil, err
		}
	}
	if err := c.AddResource(goalFieldsID, goalFields); err != nil {
		return nil, err
	}
	s := &Set{}
	open := map[string]any{"$defs": map[string]any{"capability": map[string]any{}, "snapshot": map[string]any{"type": "object"}}}
	for _, m := range missing {
		if _, err := os.Stat(filepath.Join(dir, filepath.Base(m)+".schema.json")); err == nil {
			continue
		}
		if m == sessionGoalSchema {
			s.GoalSchemaMissing = true
		}
		if err := c.AddResource(base+m+".schema.json", open); err != nil {
			return nil, err
		}
	}
	for _, x := range []struct {
		dst **jsonschema.Schema
		id  string
	}{
		{&s.EventV1, "prp/v1/event"}, {&s.EventV2, "prp/v2/event"},
		{&s.Usage, "prp/v1/usage"}, {&s.Request, "prp/v1/request"},
	} {
		if *x.dst, err = c.Compile(base + x.id + ".schema.json"); err != nil {
			return nil, err
		}
	}
	if s.GoalProjection, err = c.Compile(goalFieldsID); err != nil {
		return nil, err
	}
	if s.GoalCapabilities, err = c.Compile(goalFieldsID + "#/$defs/capabilitiesEvent"); err != nil {
		return nil, err
	}
	return s, nil
}

// Validate checks v against sch. v is JSON bytes (json.RawMessage or
// []byte) or any value encoding/json can marshal.
func Validate(sch *jsonschema.Schema, v any) error {
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	case []byte:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return err
		}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// ecmaRegexp runs a reference pattern that Go's RE2 cannot compile (the
// path patterns use lookahead) with an ECMAScript engine, the dialect JSON
// Schema patterns are written in, so no pattern is waved through.
type ecmaRegexp struct{ re *regexp2.Regexp }

func (e ecmaRegexp) MatchString(s string) bool {
	ok, err := e.re.MatchString(s)
	return err == nil && ok
}

func (e ecmaRegexp) String() string { return e.re.String() }

func regexpEngine(s string) (jsonschema.Regexp, error) {
	if re, err := regexp.Compile(s); err == nil {
		return re, nil
	}
	re, err := regexp2.Compile(s, regexp2.ECMAScript|regexp2.Unicode)
	if err != nil {
		return nil, err
	}
	return ecmaRegexp{re}, nil
}
