package prp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeCommandValidation(t *testing.T) {
	ok := `{"schema":"paperclip.prp.command.v1","commandId":"command_prp_00000001","controllerSeq":1,"type":"run.prepare","issuedAt":"2026-11-30T12:00:00Z","payload":{}}`
	c, err := DecodeCommand([]byte(ok))
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.ControllerSeq)
	require.Equal(t, "run.prepare", c.Type)

	long := strings.Repeat("a", maxCommandIDChars+1)
	bad := map[string]string{
		"not object":         `[]`,
		"null":               `null`,
		"trailing":           ok + `{}`,
		"schema":             strings.Replace(ok, "command.v1", "command.v9", 1),
		"unknown type":       strings.Replace(ok, "run.prepare", "turn.cancel", 1),
		"goal needs v2":      strings.Replace(ok, "run.prepare", "session.goal.set", 1),
		"empty id":           strings.Replace(ok, "command_prp_00000001", "", 1),
		"long id":            strings.Replace(ok, "command_prp_00000001", long, 1),
		"control char id":    strings.Replace(ok, "command_prp_00000001", `a\u0007b`, 1),
		"long issuedAt":      strings.Replace(ok, "2026-11-30T12:00:00Z", long, 1),
		"empty issuedAt":     strings.Replace(ok, "2026-11-30T12:00:00Z", "", 1),
		"empty deadline":     strings.Replace(ok, `"payload"`, `"deadlineAt":"","payload"`, 1),
		"seq zero":           strings.Replace(ok, `"controllerSeq":1`, `"controllerSeq":0`, 1),
		"seq negative":       strings.Replace(ok, `"controllerSeq":1`, `"controllerSeq":-1`, 1),
		"seq fraction":       strings.Replace(ok, `"controllerSeq":1`, `"controllerSeq":1.5`, 1),
		"seq string":         strings.Replace(ok, `"controllerSeq":1`, `"controllerSeq":"1"`, 1),
		"payload array":      strings.Replace(ok, `"payload":{}`, `"payload":[]`, 1),
		"payload missing":    strings.Replace(ok, `,"payload":{}`, ``, 1),
		"precondition array": strings.Replace(ok, `"payload"`, `"precondition":[],"payload"`, 1),
		"id not string":      strings.Replace(ok, `"command_prp_00000001"`, `7`, 1),
	}
	for name, raw := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeCommand([]byte(raw))
			require.ErrorIs(t, err, ErrInvalidCommand)
		})
	}
	v2 := strings.Replace(strings.Replace(ok, "run.prepare", "session.goal.get", 1), "command.v1", "command.v2", 1)
	_, err = DecodeCommand([]byte(v2))
	require.NoError(t, err)
}

// FuzzDecodeCommand: any input either decodes to a command that validates
// and fingerprints stably, or fails with ErrInvalidCommand. Never panics.
func FuzzDecodeCommand(f *testing.F) {
	f.Add([]byte(`{"schema":"paperclip.prp.command.v1","commandId":"command_prp_00000001","controllerSeq":1,"type":"run.prepare","issuedAt":"2026-11-30T12:00:00Z","payload":{}}`))
	f.Add([]byte(`{"schema":"paperclip.prp.command.v2","commandId":"c","controllerSeq":18446744073709551615,"type":"session.goal.set","issuedAt":"t","deadlineAt":null,"precondition":{"runnerState":["ready"]},"payload":{"objective":"x"}}`))
	f.Add([]byte(`{"schema":"paperclip.prp.command.v1","commandId":"c","controllerSeq":1e3,"type":"run.prepare","issuedAt":"t","payload":{}}`))
	f.Add([]byte(`{"commandId":"\u0000"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidCommand) {
				t.Fatalf("error does not wrap ErrInvalidCommand: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded command does not validate: %v", err)
		}
		fp1, err := c.Fingerprint()
		if err != nil {
			t.Fatalf("fingerprint: %v", err)
		}
		// Re-encoding with other whitespace keeps the fingerprint.
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "  "); err != nil {
			t.Fatalf("indent: %v", err)
		}
		c2, err := DecodeCommand(buf.Bytes())
		if err != nil {
			t.Fatalf("reformatted command rejected: %v", err)
		}
		fp2, err := c2.Fingerprint()
		if err != nil || fp1 != fp2 {
			t.Fatalf("fingerprint not stable: %v", err)
		}
	})
}
