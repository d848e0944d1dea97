package config

import "fmt"

// StorageCommand is the first argument that selects storage mode:
// `paperclip-runnerd storage <operation> [--flag value]…` (durability.md
// §8.1). The reference's indexed SQLite store answers these operations;
// runnerd keeps the JSON state (durability.md §7.1) and implements none.
const StorageCommand = "storage"

// maxStorageOperationBytes bounds the operation name echoed on stderr
// (beyond: the reference's longest, "archive-controller", has 18 bytes).
const maxStorageOperationBytes = 64

// StorageStateFile is the reference's indexed store beside
// runner-state.json (durability.md §7.2). runnerd never creates it and
// refuses to start next to one (§7.1: the reference fails closed across
// formats, and the server's archive code keys on this file).
const StorageStateFile = "runner-state.sqlite"

// parseStorage reads the arguments after "storage". Only the operation
// matters: every operation is unsupported, so its flags are not read (the
// callers pass flags runnerd has no use for, and an unsupported operation
// must fail the same way whatever they are).
func parseStorage(args []string) (Config, error) {
	if len(args) == 0 {
		return Config{}, &usageError{Problem: "storage needs an operation: paperclip-runnerd storage <operation> [--flag value]..."}
	}
	op := args[0]
	if err := checkStorageOperation(op); err != nil {
		return Config{}, &usageError{Problem: fmt.Sprintf("storage operation: %v", err)}
	}
	return Config{Mode: ModeStorage, StorageOperation: op}, nil
}

// checkStorageOperation accepts the reference's operation spelling
// (lower-case words joined by '-'), so the name is safe to print.
func checkStorageOperation(op string) error {
	if op == "" || len(op) > maxStorageOperationBytes {
		return fmt.Errorf("must be 1-%d bytes", maxStorageOperationBytes)
	}
	for i := 0; i < len(op); i++ {
		ch := op[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' && i > 0) {
			return fmt.Errorf("want lower-case letters, digits and '-' (like inspect-state)")
		}
	}
	return nil
}

// StorageUnsupported is the failure every storage operation ends with:
// exit 1 and one stderr line "paperclip-runnerd: storage_unsupported:
// <operation>" (durability.md §8.1; NSC callers read only the status and
// stderr).
func StorageUnsupported(op string) error {
	return NewError(CodeStorageUnsupported, op, nil)
}
