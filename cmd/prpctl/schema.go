package main

import "github.com/pcrunner/pcrunner/internal/prp"

// commandSchema is the command schema a script step is sent under: the
// session goal commands exist only from v2 on (prp.md §7.1), everything
// else goes as v1, as the core sends it.
func commandSchema(commandType string) string {
	switch commandType {
	case prp.CommandSessionGoalGet, prp.CommandSessionGoalSet, prp.CommandSessionGoalClear:
		return prp.CommandSchemaV2
	}
	return prp.CommandSchemaV1
}
