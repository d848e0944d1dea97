package catalog

import (
	"encoding/json"
	"testing"
)

// BenchmarkValidateInput is a typical small tool call: an object with a
// pattern-checked id and a bounded string.
func BenchmarkValidateInput(b *testing.B) {
	c := mustParse(b, []Operation{op("tasks.get", taskSchema)})
	args := json.RawMessage(`{"taskId":"T-1234","body":"short note"}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.ValidateInput("tasks.get", args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse256 parses and compiles a full catalog of small schemas.
func BenchmarkParse256(b *testing.B) {
	ops := make([]Operation, MaxOperations)
	for i := range ops {
		ops[i] = op("op."+string(rune('a'+i%26))+string(rune('a'+i/26)), taskSchema)
	}
	raw := catalogJSON(b, ops)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckInput(b *testing.B) {
	args := json.RawMessage(`{"taskId":"T-1234","body":"short note","url":"https://example.test/a?b=c"}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckInput(args); err != nil {
			b.Fatal(err)
		}
	}
}
