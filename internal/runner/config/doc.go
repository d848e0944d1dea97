// Package config is runnerd's contract with whoever launches it, settled
// before the control loop starts: the command line (ParseArgs, Help), the
// bootstrap ticket taken from the environment (TakeBootstrapTicket), the
// build metadata (--build-metadata), the bounded, redacted diagnostics files
// (--diagnostics-directory), and the coded errors and exit statuses runnerd
// ends with (FormatError, ExitCode). It never imports the loop
// (internal/runner); the loop reads a Config and reports through Error.
package config
