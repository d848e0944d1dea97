// Package workspace reads an agent's working directory for runnerd's diff
// card and file cards (workspace.md §2, §4, §5): the session's resolved
// root, bounded snapshots of it, the runner-verified change set between two
// snapshots, the harness-reported change set of a turn, and the file
// references of a final assistant message.
//
// Contract:
//   - Nothing here follows a symlink or leaves the root: a walk opens every
//     directory and file relative to its parent's descriptor with
//     O_NOFOLLOW, and a file reference opens through os.Root.
//   - Every walk is bounded by its context (the caller's time bound) and by
//     the caps below; a capped walk says so (Snapshot.Incomplete) and never
//     passes for an empty workspace.
//   - Wire paths are root-relative, '/'-separated and valid (ValidPath);
//     an entry whose path is not is dropped.
//
// A Root is immutable and safe for concurrent use; a Snapshot is read-only
// once Walk returns it.
package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds (workspace.md §2-§5; the reference values are WD's).
const (
	// MaxFiles, MaxDirs and MaxRetainedBytes stop a walk (§4.2).
	MaxFiles         = 2000
	MaxDirs          = 500
	MaxRetainedBytes = 32 << 20
	// MaxFileRetainBytes is the largest file whose content a walk keeps
	// for diffing (§4.3); a larger one is hashed only and counts as binary.
	MaxFileRetainBytes = 2 << 20
	// MaxHashBytes is the largest file a walk reads; a larger one is
	// known by its identity (size, mtime, ctime, inode) only (§4.3).
	MaxHashBytes = 64 << 20
	// BinarySniffBytes: a NUL among the first so many bytes makes a file
	// binary (§4.3, §5.4).
	BinarySniffBytes = 8192
	// RecentWindow: a file modified within this of the baseline walk's
	// start (or later) is re-read even when its stat is unchanged (§4.3).
	RecentWindow = time.Second
	// MaxPathChars bounds a wire path (workspace-diff.schema.json).
	MaxPathChars = 1024
	// MaxDirEntries bounds the names read from one directory: past it the
	// walk is capped, so a directory of 100,000 entries costs one bounded
	// read, not a sort of everything in it (beyond).
	MaxDirEntries = 4 * (MaxFiles + MaxDirs)
	// DefaultWalkTimeout is --workspace-baseline-timeout-ms's default (§4.1).
	DefaultWalkTimeout = time.Second
)

// ErrUnavailable is a root that is missing or not a directory (§2).
var ErrUnavailable = errors.New("workspace unavailable")

// skippedDirs are directory names a walk never enters (§4.2).
var skippedDirs = map[string]bool{
	".git": true, ".paperclip-runner-prp": true, ".paperclip-runner": true, ".paperclip-runtime": true,
	".next": true, ".turbo": true, ".venv": true, "venv": true, "__pycache__": true, ".cache": true,
	".pytest_cache": true, ".mypy_cache": true, ".gradle": true, "build": true, "coverage": true,
	"dist": true, "node_modules": true, "target": true,
}

// Root is a session's workspace root, resolved once (§2).
type Root struct {
	// dir is the absolute, symlink-resolved root.
	dir string
	// excluded are root-relative directories never walked (runnerd's own
	// state directory when it lies under the root).
	excluded map[string]bool
}

// Open resolves cwd (an absolute directory, symlinks resolved) as a root.
// Each path in exclude that lies under it is never walked. A missing or
// non-directory cwd is ErrUnavailable.
func Open(cwd string, exclude ...string) (*Root, error) {
	if !filepath.IsAbs(cwd) {
		return nil, fmt.Errorf("open workspace: %w: cwd is not absolute", ErrUnavailable)
	}
	dir, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w: %w", ErrUnavailable, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w: %w", ErrUnavailable, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open workspace: %w: not a directory", ErrUnavailable)
	}
	r := &Root{dir: dir, excluded: map[string]bool{}}
	for _, ex := range exclude {
		if ex == "" {
			continue
		}
		if rel, ok := r.Rel(resolveExisting(ex)); ok {
			r.excluded[rel] = true
		}
	}
	return r, nil
}

// Dir is the resolved root directory.
func (r *Root) Dir() string { return r.dir }

// Rel returns the wire path of an absolute, already resolved path under
// the root; ok is false for the root itself, a path outside it or one
// that is not a valid wire path.
func (r *Root) Rel(abs string) (string, bool) {
	rel, err := filepath.Rel(r.dir, filepath.Clean(abs))
	if err != nil {
		return "", false
	}
	rel = filepath.ToSlash(rel)
	if !ValidPath(rel) {
		return "", false
	}
	return rel, true
}

// ValidPath reports whether p is a wire path (§2): relative, '/'-separated,
// non-empty, no empty, "." or ".." segment, at most MaxPathChars
// characters, valid UTF-8 without a line break or NUL.
func ValidPath(p string) bool {
	if p == "" || !utf8.ValidString(p) || utf8.RuneCountInString(p) > MaxPathChars ||
		strings.ContainsAny(p, "\n\r\x00") {
		return false
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// resolveExisting resolves the symlinks of p's longest existing prefix
// and appends the rest (a state directory runnerd has yet to create).
func resolveExisting(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for {
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(resolved, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
