package main

import (
	"strings"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// commandSchema is the command schema a script step is sent under: the
// session goal commands exist only from v2 on (prp.md §7.1), everything
// else goes as v1, as the core sends it.
func commandSchema(commandType string) string {
	if strings.HasPrefix(commandType, "session.goal.") {
		return prp.CommandSchemaV2
	}
	return prp.CommandSchemaV1
}
