package prp

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pcrunner/pcrunner/internal/testutil/sharedtest"
)

// declaredNames returns the string constants declared in file whose names
// start with prefix, by name. Reading the source catches a constant that
// was added without its table row.
func declaredNames(t *testing.T, file, prefix string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	require.NoError(t, err)
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, prefix) || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out[n.Name] = v
			}
		}
	}
	return out
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// TestCommandTableHoldsEveryConstant: each Command* constant of
// commands.go has exactly one row, and the table has no other row.
func TestCommandTableHoldsEveryConstant(t *testing.T) {
	require.Equal(t, values(declaredNames(t, "commands.go", "Command")), CommandTypes())
	require.True(t, IsTerminalCommand(CommandRunnerSuspend))
	require.True(t, IsTerminalCommand(CommandRunnerShutdown))
	require.False(t, IsTerminalCommand(CommandRunnerDrain))
}

// TestEventTableHoldsEveryConstant: each Event* constant of events.go has
// exactly one row, and the table has no other row.
func TestEventTableHoldsEveryConstant(t *testing.T) {
	require.Equal(t, values(declaredNames(t, "events.go", "Event")), EventTypes())
}

// schemaEnum reads the enum of a top-level property of a reference schema.
func schemaEnum(t *testing.T, dir, file, property string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if os.IsNotExist(err) {
		t.Skipf("reference schema %s not in the share", file)
	}
	require.NoError(t, err)
	var s struct {
		Properties map[string]struct {
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(b, &s))
	enum := s.Properties[property].Enum
	if len(enum) == 0 {
		t.Skipf("reference schema %s lists no %s enum", file, property)
	}
	out := map[string]bool{}
	for _, v := range enum {
		if s, ok := v.(string); ok {
			out[s] = true
		}
	}
	return out
}

// TestCommandTypesInReferenceSchemas: every command type is in the
// reference command schemas (SCH command*.schema.json), and no schema
// version lists a type below the table's MinSchema.
func TestCommandTypesInReferenceSchemas(t *testing.T) {
	dir := sharedtest.Path(t, "reference", "paperclip-protocol", "schemas")
	byVersion := map[int]map[string]bool{
		1: schemaEnum(t, dir, "command.schema.json", "type"),
		2: schemaEnum(t, dir, "command-v2.schema.json", "type"),
		3: schemaEnum(t, dir, "command-v3.schema.json", "type"),
	}
	for _, typ := range CommandTypes() {
		spec, _ := LookupCommand(typ)
		listed := false
		for v, enum := range byVersion {
			if enum[typ] {
				listed = true
				require.GreaterOrEqual(t, v, spec.MinSchema, "%s is listed by command schema v%d", typ, v)
			}
		}
		require.True(t, listed, "%s is in no reference command schema", typ)
	}
}

// TestEventTypesInReferenceSchemas: every event type is in the reference
// event schemas (SCH event*.schema.json), and exactly the types with a
// v2 replay family, or marked v2 only, are missing from the v1 enum
// (prp.md §8.2).
func TestEventTypesInReferenceSchemas(t *testing.T) {
	dir := sharedtest.Path(t, "reference", "paperclip-protocol", "schemas")
	v1 := schemaEnum(t, dir, "event.schema.json", "eventType")
	v2 := schemaEnum(t, dir, "event-v2.schema.json", "eventType")
	for _, typ := range EventTypes() {
		require.True(t, v2[typ], "%s is not in the reference v2 event schema", typ)
		rule := EventRuleOf(typ)
		require.Equal(t, rule.V2Family != "" || rule.V2Only, !v1[typ], "%s: v2 replay family %q, listed by the v1 event schema: %v", typ, rule.V2Family, v1[typ])
		want := 1
		if !v1[typ] {
			want = 2
		}
		require.Equal(t, want, rule.SchemaVersion(), typ)
	}
}

// TestEventRules pins the payload rules the runner and the store apply.
func TestEventRules(t *testing.T) {
	require.Equal(t, PayloadClosed, EventRuleOf("plan.updated").Payload)
	require.Equal(t, PayloadClosed, EventRuleOf("provider.notice.recorded").Payload)
	require.Equal(t, PayloadExact, EventRuleOf("runtime_request.created").Payload)
	require.Equal(t, PayloadOpen, EventRuleOf("item.delta").Payload)
	require.True(t, EventRuleOf("item.delta").CoalesceByItem)
	require.True(t, EventRuleOf("turn.cancelled").EndsTurn)
	require.False(t, EventRuleOf("turn.started").EndsTurn)
	require.Equal(t, "session.goal", EventRuleOf("session.goal.cleared").V2Family)
	require.Equal(t, "session.capabilities", EventRuleOf("session.capabilities.updated").V2Family)
	require.Equal(t, EventRule{}, EventRuleOf("no.such.event"))
	require.Equal(t, 1, EventRuleOf("no.such.event").SchemaVersion())
}
