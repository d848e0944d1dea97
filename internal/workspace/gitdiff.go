package workspace

import (
	"strings"
)

// MaxGitDiffChars bounds the text of one file's section a git diff parse
// keeps (§3.2: Codex's turn/diff/updated); §3.4's MaxDiffChars then
// applies to what is sent.
const MaxGitDiffChars = 256 << 10

// ParseGitDiff reads a multi-file git diff (`diff --git` sections, as
// Codex's turn/diff/updated carries) into file entries (§3.2): `new file
// mode` is a create, `deleted file mode` a delete, `rename from/to` a
// rename with its previous path, `old/new mode` without hunks a
// mode_change; `Binary files … differ` or `GIT binary patch` is binary
// with stats and diff null. Counts come only from lines inside hunks. At
// most MaxFiles entries; a later section of a path already read replaces
// it. Text outside any section is ignored. Paths are as the diff names
// them (Harness.ReplaceGit maps them to wire paths).
func ParseGitDiff(text string) []FileChange {
	var out []FileChange
	index := map[string]int{}
	for _, sec := range gitSections(text) {
		fc, ok := parseSection(sec)
		if !ok {
			continue
		}
		if i, seen := index[fc.Path]; seen {
			out[i] = fc
			continue
		}
		if len(out) >= MaxFiles {
			break
		}
		index[fc.Path] = len(out)
		out = append(out, fc)
	}
	return out
}

const gitHeader = "diff --git "

// gitSections splits text at each line that starts a `diff --git` section.
func gitSections(text string) []string {
	var secs []string
	start := -1
	for i := 0; i < len(text); {
		end := strings.IndexByte(text[i:], '\n')
		next := len(text)
		if end >= 0 {
			next = i + end + 1
		}
		if strings.HasPrefix(text[i:], gitHeader) {
			if start >= 0 {
				secs = append(secs, text[start:i])
			}
			start = i
		}
		i = next
	}
	if start >= 0 {
		secs = append(secs, text[start:])
	}
	return secs
}

// parseSection reads one `diff --git` section; ok is false when no path
// can be told.
func parseSection(sec string) (FileChange, bool) {
	if len(sec) > MaxGitDiffChars {
		sec = Cut(sec[:charStart(sec, MaxGitDiffChars)])
	}
	lines := strings.Split(strings.TrimSuffix(sec, "\n"), "\n")
	fc := FileChange{Operation: OpModify}
	var from, to, renameFrom, renameTo string
	modeChange, binary, inHunk := false, false, false
	adds, dels := 0, 0
	for _, l := range lines[1:] {
		if inHunk {
			switch {
			case strings.HasPrefix(l, "@@"):
			case strings.HasPrefix(l, "+"):
				adds++
			case strings.HasPrefix(l, "-"):
				dels++
			case strings.HasPrefix(l, " "), strings.HasPrefix(l, `\`), l == "":
			default:
				inHunk = false // not a hunk line: a header follows (malformed)
			}
			if inHunk {
				continue
			}
		}
		switch {
		case strings.HasPrefix(l, "@@"):
			inHunk = true
		case strings.HasPrefix(l, "new file mode"):
			fc.Operation = OpCreate
		case strings.HasPrefix(l, "deleted file mode"):
			fc.Operation = OpDelete
		case strings.HasPrefix(l, "rename from "):
			renameFrom = strings.TrimPrefix(l, "rename from ")
		case strings.HasPrefix(l, "rename to "):
			renameTo = strings.TrimPrefix(l, "rename to ")
		case strings.HasPrefix(l, "old mode "), strings.HasPrefix(l, "new mode "):
			modeChange = true
		case strings.HasPrefix(l, "Binary files ") && strings.HasSuffix(l, " differ"), l == "GIT binary patch":
			binary = true
		case strings.HasPrefix(l, "--- "):
			from = sidePath(strings.TrimPrefix(l, "--- "), "a/")
		case strings.HasPrefix(l, "+++ "):
			to = sidePath(strings.TrimPrefix(l, "+++ "), "b/")
		}
	}
	headA, headB := headerPaths(strings.TrimPrefix(lines[0], gitHeader))
	switch {
	case renameTo != "":
		fc.Path = renameTo
	case to != "" && to != devNull:
		fc.Path = to
	case from != "" && from != devNull:
		fc.Path = from
	default:
		fc.Path = headB
	}
	if fc.Path == "" || strings.ContainsAny(fc.Path, "\x00\n") {
		return FileChange{}, false
	}
	if renameFrom != "" || (headA != "" && headB != "" && headA != headB && fc.Operation == OpModify) {
		prev := renameFrom
		if prev == "" {
			prev = headA
		}
		if prev == "" || strings.ContainsAny(prev, "\x00\n") {
			return FileChange{}, false
		}
		fc.Operation, fc.PreviousPath = OpRename, &prev
	} else if modeChange && adds == 0 && dels == 0 && !binary && fc.Operation == OpModify {
		fc.Operation = OpModeChange
	}
	if binary {
		fc.Binary = true
		return fc, true
	}
	fc.Additions, fc.Deletions = intp(adds), intp(dels)
	if adds > 0 || dels > 0 {
		fc.Diff = strp(Cut(sec))
	}
	return fc, true
}

// sidePath is a ---/+++ line's path without its a/ or b/ prefix (and any
// tab-separated timestamp); /dev/null as is.
func sidePath(s, prefix string) string {
	if i := strings.IndexByte(s, '\t'); i >= 0 {
		s = s[:i]
	}
	if s == devNull {
		return s
	}
	return strings.TrimPrefix(s, prefix)
}

// headerPaths splits a `diff --git` header's "a/X b/Y". With spaces in
// the names the split is ambiguous; equal halves are preferred.
func headerPaths(h string) (string, string) {
	if !strings.HasPrefix(h, "a/") {
		return "", ""
	}
	if n := len(h); n%2 == 1 {
		a, b := h[:n/2], h[n/2+1:]
		if strings.HasPrefix(b, "b/") && a[2:] == b[2:] {
			return a[2:], b[2:]
		}
	}
	i := strings.Index(h, " b/")
	if i < 0 {
		return "", ""
	}
	return h[2:i], h[i+3:]
}

// charStart is the largest index ≤ n that starts a character of s.
func charStart(s string, n int) int {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return n
}
