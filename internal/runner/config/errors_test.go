package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormatErrorCarriesTheCodeTheServerLooksFor(t *testing.T) {
	cases := []struct {
		err  error
		want string
		exit int
	}{
		{NewError(CodeIngressBindConflict, "bind 0.0.0.0:43127", errors.New("address already in use")),
			"paperclip-runnerd: runner_ingress_bind_conflict: bind 0.0.0.0:43127: address already in use\n", ExitFailure},
		{NewError(CodeReconnectGraceExceeded, "disconnected longer than the reconnect grace; durable state is preserved", nil),
			"paperclip-runnerd: transport_reconnect_grace_exceeded: disconnected longer than the reconnect grace; durable state is preserved\n", ExitFailure},
		{NewError(CodeReconnectDeadlineExceeded, "lifetime ended while reconnecting", nil),
			"paperclip-runnerd: transport_reconnect_deadline_exceeded: lifetime ended while reconnecting\n", ExitFailure},
		{NewError(CodeLeaseExpired, "connection lease expired; a fresh bootstrap is required", nil),
			"paperclip-runnerd: lease_expired_requires_bootstrap: connection lease expired; a fresh bootstrap is required\n", ExitFailure},
		{ErrBootstrapFailedClosed,
			"paperclip-runnerd: bootstrap_failed_closed: bootstrap connection failed closed; provide a fresh one-use ticket\n", ExitFailure},
		{&usageError{Flag: "--max-frame-bytes", Problem: "must be between 1024 and 16777216"},
			"paperclip-runnerd: usage: --max-frame-bytes: must be between 1024 and 16777216\n", ExitUsage},
		{&usageError{Code: CodeIngressBindConflict, Flag: "--listen-path", Problem: "required in listen mode"},
			"paperclip-runnerd: runner_ingress_bind_conflict: --listen-path: required in listen mode\n", ExitUsage},
		{NewError(CodeBootstrapTicketMissing, "missing", nil), "paperclip-runnerd: bootstrap_ticket_missing: missing\n", ExitFailure},
		{&usageError{Code: CodeConnectURLInvalid, Flag: "--connect-url", Problem: "has no host"},
			"paperclip-runnerd: connect_url_invalid: --connect-url: has no host\n", ExitFailure},
		{errors.New("plain"), "paperclip-runnerd: runner_failed: plain\n", ExitFailure},
		{fmt.Errorf("run control loop: %w", NewError(CodeLeaseExpired, "expired", nil)),
			"paperclip-runnerd: lease_expired_requires_bootstrap: run control loop: lease_expired_requires_bootstrap: expired\n", ExitFailure},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, FormatError(tc.err))
		require.Equal(t, tc.exit, ExitCode(tc.err), "%v", tc.err)
	}
	require.Equal(t, ExitOK, ExitCode(nil))
	require.Empty(t, FormatError(nil))
}

func TestErrorsIsMatchesByCode(t *testing.T) {
	wrapped := fmt.Errorf("dial: %w", NewError(CodeLeaseExpired, "expired", nil))
	require.ErrorIs(t, wrapped, ErrLeaseExpired)
	require.NotErrorIs(t, wrapped, ErrReconnectGraceExceeded)
	require.NotErrorIs(t, wrapped, errUsage)
	require.Equal(t, CodeLeaseExpired, CodeOf(wrapped))

	bind := &usageError{Code: CodeIngressBindConflict, Flag: "--listen-path", Problem: "x"}
	require.ErrorIs(t, bind, errUsage)
	require.ErrorIs(t, bind, errIngressBindConflict)
	require.NotErrorIs(t, bind, ErrLeaseExpired)
	require.Equal(t, CodeIngressBindConflict, CodeOf(bind))

	cause := errors.New("cause")
	e := NewError(CodeRunnerFailed, "x", cause)
	require.ErrorIs(t, e, cause)
	require.Equal(t, CodeRunnerFailed, CodeOf(errors.New("uncoded")))
}

func TestFormatErrorIsAlwaysOneBoundedLine(t *testing.T) {
	for _, msg := range []string{
		"line one\nline two\r\nline three",
		"tab\there\x00nul\u2028sep\u0085nel",
		strings.Repeat("é", 4000),
		strings.Repeat("x", 10000) + "\n",
	} {
		line := FormatError(NewError(CodeRunnerFailed, msg, nil))
		require.Equal(t, 1, strings.Count(line, "\n"), "%q", line)
		require.True(t, strings.HasSuffix(line, "\n"))
		require.LessOrEqual(t, len(line), maxErrorLineBytes)
		require.True(t, strings.HasPrefix(line, StderrPrefix))
		require.NotContains(t, line, "\r")
		require.NotContains(t, line, "\x00")
		require.True(t, strings.ToValidUTF8(line, "?") == line, "cut inside a UTF-8 sequence")
	}
}
