package config

import (
	"errors"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// StateCommand is the first argument that selects the operator's view of a
// state directory: `paperclip-runnerd state dump --state-dir DIR` prints
// the state without a running runnerd and without changing anything.
const StateCommand = "state"

// StateDumpOperation is the one state operation.
const StateDumpOperation = "dump"

const stateUsage = "paperclip-runnerd state dump --state-dir DIR"

// parseStateCommand reads the arguments after "state": the operation, then
// --state-dir (required; a relative path is taken from the working
// directory, as an operator types it) and nothing else.
func parseStateCommand(args []string) (Config, error) {
	if len(args) == 0 || args[0] != StateDumpOperation {
		return Config{}, &usageError{Problem: "state needs the dump operation: " + stateUsage}
	}
	fs := pflag.NewFlagSet("paperclip-runnerd state dump", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var dir string
	fs.StringVar(&dir, "state-dir", "", "the state directory to print")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, &usageError{Problem: "state dump: " + quote.Text(err.Error()) + ": " + stateUsage}
	}
	if fs.NArg() > 0 {
		return Config{}, &usageError{Problem: "state dump: unexpected argument " + quote.Text(fs.Arg(0)) + ": " + stateUsage}
	}
	switch {
	case dir == "":
		return Config{}, &usageError{Flag: "--state-dir", Problem: "required: " + stateUsage}
	case len(dir) > maxPathBytes || strings.ContainsRune(dir, 0):
		return Config{}, &usageError{Flag: "--state-dir", Problem: "not a usable path"}
	}
	return Config{Mode: ModeStateDump, StateDir: filepath.Clean(dir)}, nil
}
