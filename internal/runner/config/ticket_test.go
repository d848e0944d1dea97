package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const secretTicket = "bt_SECRET-ticket-value-0123456789"

// TestBootstrapTicketNeverPrints proves that no way of printing, logging or
// encoding the ticket reveals it: fmt verbs on the pointer, the value and
// structs holding either (exported or not), slog with both handlers,
// encoding/json, and errors that wrap it.
func TestBootstrapTicketNeverPrints(t *testing.T) {
	tk, err := NewBootstrapTicket(secretTicket)
	require.NoError(t, err)
	holder := struct {
		Ticket  *BootstrapTicket
		Value   BootstrapTicket
		private BootstrapTicket
		ptr     *BootstrapTicket
	}{tk, *tk, *tk, tk}

	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%o", "%b", "%T", "%p"} {
		out = append(out, fmt.Sprintf(verb, tk), fmt.Sprintf(verb, *tk), fmt.Sprintf(verb, holder), fmt.Sprintf(verb, &holder))
	}
	out = append(out, fmt.Sprint(tk), fmt.Sprintln(*tk), tk.String(), tk.GoString())
	out = append(out, fmt.Errorf("handshake with %v: %w", tk, NewError(CodeRunnerFailed, tk.String(), nil)).Error())

	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		logger := slog.New(h(&buf))
		logger.Info("ticket", "t", tk, "v", *tk, "holder", holder, slog.Any("any", tk), slog.Group("g", "t", tk))
		logger.With("t", tk).Warn("again")
		out = append(out, buf.String())
	}
	for _, v := range []any{tk, *tk, holder, map[string]any{"t": tk}} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	b, err := tk.MarshalText()
	require.NoError(t, err)
	out = append(out, string(b))

	for _, s := range out {
		require.NotContains(t, s, secretTicket)
		require.NotContains(t, s, "SECRET")
		require.NotContains(t, s, fmt.Sprintf("%x", secretTicket))
		require.NotContains(t, s, fmt.Sprint([]byte(secretTicket))[1:20])
	}
	require.Contains(t, fmt.Sprintf("%v", tk), "[redacted]")
}

func TestBootstrapTicketRevealAndDestroy(t *testing.T) {
	tk, err := NewBootstrapTicket(secretTicket)
	require.NoError(t, err)
	require.True(t, tk.Present())
	got := tk.Reveal()
	require.Equal(t, secretTicket, string(got))
	got[0] = 'X' // a copy: the ticket is unchanged
	require.Equal(t, secretTicket, string(tk.Reveal()))

	copyOfTicket := *tk // shares the secret: Destroy must wipe it for both
	tk.Destroy()
	require.False(t, tk.Present())
	require.Nil(t, tk.Reveal())
	require.False(t, copyOfTicket.Present())
	tk.Destroy() // idempotent

	var none *BootstrapTicket
	require.False(t, none.Present())
	require.Nil(t, none.Reveal())
	none.Destroy()
}

func TestNewBootstrapTicketRejectsBadValues(t *testing.T) {
	for _, v := range []string{"", "   ", "\t\n", strings.Repeat("t", maxBootstrapTicketBytes+1)} {
		tk, err := NewBootstrapTicket(v)
		require.Nil(t, tk)
		require.ErrorIs(t, err, errBootstrapTicketInvalid)
		require.Equal(t, ExitFailure, ExitCode(err), "the reference exits 1")
	}
}

func TestTakeBootstrapTicketInProcess(t *testing.T) {
	t.Setenv(BootstrapTicketEnv, "   ")
	tk, err := TakeBootstrapTicket()
	require.Nil(t, tk)
	require.ErrorIs(t, err, errBootstrapTicketInvalid)
	_, still := os.LookupEnv(BootstrapTicketEnv)
	require.False(t, still, "an invalid ticket is removed too")

	tk, err = TakeBootstrapTicket()
	require.NoError(t, err)
	require.Nil(t, tk, "absent variable")
}

const helperEnv = "PCRUNNER_TICKET_HELPER"

// TestTakeBootstrapTicketRemovesItEverywhere starts this test binary as a
// helper process with the ticket in its initial environment. The helper
// takes the ticket, then checks that it is gone from os.Environ, from the
// environment of a child it starts, and from its own /proc/self/environ,
// which any process of the same user (an agent) could read.
func TestTakeBootstrapTicketRemovesItEverywhere(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestTicketHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", BootstrapTicketEnv+"="+secretTicket, "PCRUNNER_AFTER_TICKET=kept")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "helper output:\n%s", out)
	require.Contains(t, string(out), "HELPER-OK")
	require.NotContains(t, string(out), secretTicket)
}

func TestTicketHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		// Not a skip: outside its parent's child process this test has
		// nothing to check, and a skip would hide real ones in the report.
		return
	}
	tk, err := TakeBootstrapTicket()
	require.NoError(t, err)
	require.Equal(t, secretTicket, string(tk.Reveal()), "value taken")

	_, ok := os.LookupEnv(BootstrapTicketEnv)
	require.False(t, ok, "still in os.Environ")
	for _, kv := range os.Environ() {
		require.NotContains(t, kv, secretTicket)
	}

	child, err := exec.Command("/bin/sh", "-c", "cat /proc/self/environ; echo; env").Output()
	require.NoError(t, err)
	require.NotContains(t, string(child), secretTicket, "child inherited the ticket")
	require.Contains(t, string(child), "PCRUNNER_AFTER_TICKET=kept", "child lost other variables")

	self, err := os.ReadFile("/proc/self/environ")
	require.NoError(t, err)
	require.NotContains(t, string(self), secretTicket, "/proc/self/environ still shows the ticket")
	require.Contains(t, string(self), "PCRUNNER_AFTER_TICKET=kept", "scrub damaged other variables")
	require.Contains(t, string(self), BootstrapTicketEnv+"=\x00", "the name stays, the value is zeroed")

	_, err = ParseArgs([]string{"--build-metadata"}, os.LookupEnv)
	require.NoError(t, err, "ParseArgs sees the ticket gone")
	fmt.Println("HELPER-OK")
}
