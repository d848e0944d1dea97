package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// File reference bounds (workspace.md §5).
const (
	FileReferenceSchema = "paperclip.workspace.file_reference.v1"
	// MaxReferences bounds the references of one turn (§5.1).
	MaxReferences = 32
	// MaxReferenceReadBytes: larger files get no preview or digest (§5.4).
	MaxReferenceReadBytes = 1 << 20
	// MaxPreviewBytes bounds a preview (§5.4, beyond: 64 KiB).
	MaxPreviewBytes = 64 << 10
	// MaxDisplayNameChars bounds displayName (the schema's maxLength).
	MaxDisplayNameChars = 255
	// MaxLine bounds a reference's line (§5.1).
	MaxLine = 1_000_000
	// referenceHashHex is the hex digits of the id's digest (§5.3).
	referenceHashHex = 24
)

// FileReference is a paperclip.workspace.file_reference.v1 payload.
type FileReference struct {
	Schema           string  `json:"schema"`
	ReferenceID      string  `json:"referenceId"`
	Source           string  `json:"source"`
	Path             string  `json:"path"`
	DisplayName      string  `json:"displayName"`
	MediaType        *string `json:"mediaType"`
	Presentation     string  `json:"presentation"`
	Line             *int    `json:"line"`
	Preview          *string `json:"preview"`
	PreviewTruncated bool    `json:"previewTruncated"`
	ContentDigest    *string `json:"contentDigest"`
}

// Payload is the reference as an event payload.
func (r FileReference) Payload() map[string]any {
	return toMap(r)
}

// Target is a decoded link target: a path (relative or absolute, not yet
// checked against a root) and its line (0: none).
type Target struct {
	Path     string
	Absolute bool
	Line     int
}

var (
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	lineRE   = regexp.MustCompile(`^L([0-9]{1,9})(?:C[0-9]{1,9})?$`)
	suffixRE = regexp.MustCompile(`:([0-9]{1,9})$`)
)

// errTarget is a link target that names no workspace file.
var errTarget = errors.New("not a workspace file target")

// ParseTarget decodes a raw link target (§5.1): a `#L<n>` (optionally
// `C<n>`) fragment or a trailing `:<n>` sets the line, `file:` URLs give
// their decoded path, other schemes are refused, the rest is
// percent-decoded; a decoded NUL refuses the link.
func ParseTarget(raw string) (Target, error) {
	raw = strings.TrimSpace(raw)
	var t Target
	frag := ""
	if i := strings.IndexByte(raw, '#'); i >= 0 {
		raw, frag = raw[:i], raw[i+1:]
	}
	if m := lineRE.FindStringSubmatch(frag); m != nil {
		t.Line, _ = strconv.Atoi(m[1])
	}
	if m := suffixRE.FindStringSubmatch(raw); m != nil {
		raw = raw[:len(raw)-len(m[0])]
		if t.Line == 0 {
			t.Line, _ = strconv.Atoi(m[1])
		}
	}
	if t.Line < 1 || t.Line > MaxLine {
		t.Line = 0
	}
	var p string
	if schemeRE.MatchString(raw) {
		u, err := url.Parse(raw)
		if err != nil || !strings.EqualFold(u.Scheme, "file") || (u.Host != "" && u.Host != "localhost") {
			return Target{}, errTarget
		}
		p = u.Path
		t.Absolute = true
	} else {
		d, err := url.PathUnescape(raw)
		if err != nil {
			return Target{}, errTarget
		}
		p = d
		t.Absolute = strings.HasPrefix(p, "/")
	}
	if p == "" || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
		return Target{}, errTarget
	}
	t.Path = path.Clean(p)
	return t, nil
}

// References builds the file references of a final assistant message
// (§5): at most MaxReferences, deduplicated on path and line, each a
// regular file beneath the root opened through os.Root. cwd is the
// descriptor's cwd as given (an absolute target may name the root by it
// or by its resolved path); redact is the outbox sanitiser's text
// redactor (a preview it would change is null). Once ctx ends no further
// file is read.
func (r *Root) References(ctx context.Context, providerTurnID, cwd, message string, redact func(string) string) []FileReference {
	var out []FileReference
	links := Links(message)
	if len(links) == 0 {
		return nil
	}
	fsRoot, err := os.OpenRoot(r.dir)
	if err != nil {
		return nil
	}
	defer fsRoot.Close()
	seen := map[string]bool{}
	for _, l := range links {
		if len(out) >= MaxReferences || ctx.Err() != nil {
			break
		}
		t, err := ParseTarget(l.Target)
		if err != nil {
			continue
		}
		rel, ok := r.wirePath(t, cwd)
		if !ok {
			continue
		}
		key := rel + ":" + lineKey(t.Line)
		if seen[key] {
			continue
		}
		ref, ok := r.reference(fsRoot, providerTurnID, rel, l.Label, t.Line, redact)
		if !ok {
			continue
		}
		seen[key] = true
		out = append(out, ref)
	}
	return out
}

// wirePath is a target's root-relative path: a relative target joins the
// root; an absolute one must already lie under it (never re-rooted).
func (r *Root) wirePath(t Target, cwd string) (string, bool) {
	if !t.Absolute {
		if t.Path == ".." || strings.HasPrefix(t.Path, "../") || t.Path == "." {
			return "", false
		}
		return t.Path, ValidPath(t.Path)
	}
	for _, base := range []string{r.dir, filepath.Clean(cwd)} {
		if base == "" || base == "." {
			continue
		}
		if rel, err := filepath.Rel(base, t.Path); err == nil && !filepath.IsAbs(rel) {
			rel = filepath.ToSlash(rel)
			if rel != ".." && !strings.HasPrefix(rel, "../") && ValidPath(rel) {
				return rel, true
			}
		}
	}
	return "", false
}

func lineKey(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// reference opens rel beneath the root and describes it; ok is false for
// anything but a regular file.
func (r *Root) reference(fsRoot *os.Root, providerTurnID, rel, label string, line int, redact func(string) string) (FileReference, bool) {
	f, err := fsRoot.OpenFile(filepath.FromSlash(rel), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return FileReference{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return FileReference{}, false
	}
	sum := sha256.Sum256([]byte(providerTurnID + "\x00" + rel + ":" + lineKey(line)))
	ref := FileReference{
		Schema:      FileReferenceSchema,
		ReferenceID: providerTurnID + ":file:" + hex.EncodeToString(sum[:])[:referenceHashHex],
		Source:      SourceVerified,
		Path:        rel,
		DisplayName: displayName(label, rel),
	}
	ref.MediaType, ref.Presentation = mediaType(rel)
	if line > 0 {
		ref.Line = intp(line)
	}
	if fi.Size() > MaxReferenceReadBytes {
		ref.PreviewTruncated = true
		return ref, true
	}
	content, err := io.ReadAll(io.LimitReader(f, MaxReferenceReadBytes+1))
	if err != nil {
		return FileReference{}, false
	}
	if len(content) > MaxReferenceReadBytes {
		ref.PreviewTruncated = true
		return ref, true
	}
	digest := sha256.Sum256(content)
	ref.ContentDigest = strp("sha256:" + hex.EncodeToString(digest[:]))
	if previewable(rel, content) {
		p := cutUTF8(content, MaxPreviewBytes)
		if redact(p) == p {
			ref.Preview = strp(p)
			ref.PreviewTruncated = len(p) < len(content)
		}
	}
	return ref, true
}

// previewable: no preview for binary or non-UTF-8 content, dotfiles and
// key files (§5.4).
func previewable(rel string, content []byte) bool {
	base := path.Base(rel)
	if strings.HasPrefix(base, ".") || strings.HasSuffix(base, ".pem") || strings.HasSuffix(base, ".key") ||
		strings.HasPrefix(base, "id_") {
		return false
	}
	for seg := range strings.SplitSeq(rel, "/") {
		if strings.HasPrefix(seg, ".") {
			return false
		}
	}
	if bytes.IndexByte(content[:min(len(content), BinarySniffBytes)], 0) >= 0 {
		return false
	}
	return utf8.Valid(content[:len(cutUTF8(content, MaxPreviewBytes))])
}

// cutUTF8 is at most n bytes of b, not splitting a character.
func cutUTF8(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n])
}

// displayName is the trimmed label or the basename, at most
// MaxDisplayNameChars characters.
func displayName(label, rel string) string {
	name := strings.TrimSpace(label)
	if name == "" || !utf8.ValidString(name) {
		name = path.Base(rel)
	}
	if utf8.RuneCountInString(name) > MaxDisplayNameChars {
		name = string([]rune(name)[:MaxDisplayNameChars])
	}
	return name
}

// mediaType is a path's media type and presentation by extension (§5.3).
func mediaType(rel string) (*string, string) {
	ext := strings.ToLower(strings.TrimPrefix(path.Ext(rel), "."))
	switch ext {
	case "md", "mdx":
		return strp("text/markdown"), "document"
	case "txt", "rst":
		return strp("text/plain"), "document"
	case "png", "gif", "webp", "svg", "jpeg":
		return strp("image/" + ext), "image"
	case "jpg":
		return strp("image/jpeg"), "image"
	case "ts", "tsx", "js", "jsx", "json", "rs", "py", "go", "java", "css", "html", "yaml", "yml", "toml", "sh":
		return strp("text/plain"), "code"
	}
	return nil, "generic"
}

// WirePath is the wire path of a path an agent reported (an ACP tool
// location or diff path): relative paths join the root, absolute ones
// must lie under it (by the resolved root or cwd as given); ok is false
// otherwise.
func (r *Root) WirePath(p, cwd string) (string, bool) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", false
	}
	return r.wirePath(Target{Path: path.Clean(filepath.ToSlash(p)), Absolute: filepath.IsAbs(p)}, cwd)
}
