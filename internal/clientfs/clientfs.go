// Package clientfs serves the ACP client file system (tools.md §8, acp.md
// §1.2): fs/read_text_file and fs/write_text_file, confined to the session's
// directories.
//
// Contract:
//   - A path is absolute and lies inside Roots.Cwd or one of
//     Roots.Additional. It is resolved beneath that root by the kernel
//     (openat2 RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS, or Go's os.Root where
//     openat2 is unavailable): `..`, an absolute symlink or a relative
//     symlink that leaves the root is an error, never a silent re-root.
//   - A read answers at most maxResponseBytes of encoded result, else a
//     clear error; it stops reading past the bound, so memory stays bounded
//     whatever the file's size.
//   - A write is atomic: a temporary file in the target's directory (opened
//     beneath the root), the existing mode kept (0644 for a new file),
//     fsync, rename within that directory, directory fsync. Missing parent
//     directories inside the root are created.
//   - Errors are *Error: a JSON-RPC code and a message that names the
//     problem and the path as the agent gave it, never file contents.
//
// Every function is safe for concurrent use.
package clientfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
	"unsafe"

	"github.com/pcrunner/pcrunner/internal/provider"
)

// ACP method names served here (acp.md §1.2).
const (
	MethodReadTextFile  = "fs/read_text_file"
	MethodWriteTextFile = "fs/write_text_file"
)

// Bounds.
const (
	// maxResponseBytes bounds the encoded result of a read, {"content":…}
	// (tools.md §8: the encoded response ≤ 8 MiB, under the ACP 10 MiB
	// line limit). envelopeReserve of it is kept for the JSON-RPC envelope
	// around the result (jsonrpc, id), so the whole line stays ≤ 8 MiB for
	// any id shorter than that reserve.
	maxResponseBytes = 8 << 20
	envelopeReserve  = 1 << 10
	// maxPathBytes is Linux PATH_MAX: a longer path cannot be opened.
	maxPathBytes = 4096
	// readChunk is the buffer a ranged read streams through, so a read of
	// a few lines of a huge file holds only this much beyond its result.
	readChunk = 64 << 10
	// newFileMode is the mode of a file the agent creates (tools.md §8).
	newFileMode = 0o644
	// newDirMode is the mode of a parent directory a write creates.
	newDirMode = 0o755
)

// maxResultBytes is what the encoded result may take.
const maxResultBytes = maxResponseBytes - envelopeReserve

// The JSON-RPC error codes and the refusal type are acpx's, shared with
// the other client-side handlers.
const (
	codeInvalidParams    = provider.CodeInvalidParams
	codeInternalError    = provider.CodeInternalError
	CodeResourceNotFound = provider.CodeResourceNotFound
)

// Error is a refused request (provider.ClientError).
type Error = provider.ClientError

// Roots are the directories a session may touch: its cwd and the
// additionalDirectories it was opened with. ReadOnly refuses every write
// (permission mode deny-all, tools.md §8).
type Roots struct {
	Cwd        string
	Additional []string
	ReadOnly   bool
}

// ReadRequest is fs/read_text_file's params. Line is 1-based; Limit counts
// lines. Absent means the whole file.
type ReadRequest struct {
	SessionID string  `json:"sessionId"`
	Path      string  `json:"path"`
	Line      *uint32 `json:"line,omitempty"`
	Limit     *uint32 `json:"limit,omitempty"`
}

// readResult is fs/read_text_file's result.
type readResult struct {
	Content string `json:"content"`
}

// WriteRequest is fs/write_text_file's params.
type WriteRequest struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Content   string `json:"content"`
}

// WriteResult is fs/write_text_file's (empty) result.
type WriteResult struct{}

// DecodeRead decodes fs/read_text_file params; a malformed request is an
// invalid-params *Error.
func DecodeRead(raw json.RawMessage) (ReadRequest, error) {
	var r ReadRequest
	if err := DecodeParams(raw, &r); err != nil {
		return ReadRequest{}, invalid("read text file: params are not a valid request")
	}
	if r.SessionID == "" || r.Path == "" {
		return ReadRequest{}, invalid("read text file: sessionId and path are required")
	}
	return r, nil
}

// DecodeWrite decodes fs/write_text_file params; content is required (an
// empty string is a valid content).
func DecodeWrite(raw json.RawMessage) (WriteRequest, error) {
	var w struct {
		SessionID string  `json:"sessionId"`
		Path      string  `json:"path"`
		Content   *string `json:"content"`
	}
	if err := DecodeParams(raw, &w); err != nil {
		return WriteRequest{}, invalid("write text file: params are not a valid request")
	}
	if w.SessionID == "" || w.Path == "" || w.Content == nil {
		return WriteRequest{}, invalid("write text file: sessionId, path and content are required")
	}
	return WriteRequest{SessionID: w.SessionID, Path: w.Path, Content: *w.Content}, nil
}

// DecodeParams decodes the params of an ACP client method, here and in
// internal/terminal, into v: exactly one JSON object, nothing after it. The
// error never quotes the params; callers answer it with their own
// invalid-params *Error.
func DecodeParams(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return errors.New("params are not an object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after params")
	}
	return nil
}

// Read serves fs/read_text_file.
func Read(r Roots, req ReadRequest) (readResult, error) {
	const op = "read text file"
	root, rel, err := r.locate(op, req.Path)
	if err != nil {
		return readResult{}, err
	}
	f, err := openFile(root, rel)
	if err != nil {
		return readResult{}, pathError(op, req.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return readResult{}, pathError(op, req.Path, err)
	}
	if fi.IsDir() {
		return readResult{}, pathError(op, req.Path, errIsDir)
	}
	if !fi.Mode().IsRegular() {
		return readResult{}, pathError(op, req.Path, errNotRegular)
	}
	whole := (req.Line == nil || *req.Line <= 1) && req.Limit == nil
	if whole && fi.Size() > maxResultBytes {
		return readResult{}, tooLarge(req.Path)
	}
	var b []byte
	if whole {
		b, err = readAll(f, fi.Size())
	} else {
		b, err = readLines(f, req.Line, req.Limit)
	}
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return readResult{}, tooLarge(req.Path)
		}
		return readResult{}, pathError(op, req.Path, err)
	}
	if encodedResultLen(b) > maxResultBytes {
		return readResult{}, tooLarge(req.Path)
	}
	// b is never touched again: share its bytes instead of copying up to
	// 8 MiB (as strings.Builder does).
	return readResult{Content: unsafe.String(unsafe.SliceData(b), len(b))}, nil
}

// Write serves fs/write_text_file.
func Write(r Roots, req WriteRequest) error {
	const op = "write text file"
	if r.ReadOnly {
		return &Error{Code: codeInternalError, Message: op + ": " + quote(req.Path) + ": refused: the session's permission mode deny-all forbids writes"}
	}
	root, rel, err := r.locate(op, req.Path)
	if err != nil {
		return err
	}
	if rel == "." {
		return pathError(op, req.Path, errIsDir)
	}
	if err := writeFile(root, rel, []byte(req.Content)); err != nil {
		return pathError(op, req.Path, err)
	}
	return nil
}

// locate checks that path is absolute and lexically inside a root, and
// returns that root and the cleaned path relative to it. The longest
// matching root wins. The kernel-side resolution beneath the root is what
// actually confines the access; this check gives a clear error early.
func (r Roots) locate(op, path string) (root, rel string, err error) {
	switch {
	case len(path) > maxPathBytes:
		return "", "", invalid(op + ": path is longer than " + strconv.Itoa(maxPathBytes) + " bytes")
	case strings.IndexByte(path, 0) >= 0:
		return "", "", invalid(op + ": path contains a NUL byte")
	case !filepath.IsAbs(path):
		return "", "", invalid(op + ": " + quote(path) + ": not an absolute path")
	}
	p := filepath.Clean(path)
	for _, c := range append([]string{r.Cwd}, r.Additional...) {
		if c == "" || !filepath.IsAbs(c) {
			continue
		}
		c = filepath.Clean(c)
		rest, ok := within(c, p)
		if ok && len(c) > len(root) {
			root, rel = c, rest
		}
	}
	if root == "" {
		return "", "", invalid(op + ": " + quote(path) + ": outside the session's directories")
	}
	return root, rel, nil
}

// within reports whether p is root or below it, and p relative to root.
func within(root, p string) (string, bool) {
	if p == root {
		return ".", true
	}
	prefix := root
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if !strings.HasPrefix(p, prefix) {
		return "", false
	}
	return p[len(prefix):], true
}

// Resolution and write failures the platform code reports, wrapped
// around the syscall error; pathError turns each into its ACP code.
var (
	errEscape     = errors.New("resolves outside the session's directories")
	errLoop       = errors.New("has too many levels of symbolic links, or a magic link")
	errSymlink    = errors.New("is a symbolic link; write to the file it points to")
	errIsDir      = errors.New("is a directory")
	errNotRegular = errors.New("is not a regular file")
	errNotFound   = errors.New("not found")
	errNotDir     = errors.New("a parent is not a directory")
	errDenied     = errors.New("permission denied")
	errRace       = errors.New("could not be resolved safely while its directories were being renamed")
	errMoved      = errors.New("its directory moved out of the session's directories during the write; the write was undone")
	errTooLarge   = errors.New("too large")
)

// failureCodes gives each failure its code: a path the session may not
// use is invalid params; a missing file is ACP's resource not found; the
// rest are internal errors.
var failureCodes = []struct {
	err  error
	code int
}{
	{errEscape, codeInvalidParams}, {errLoop, codeInvalidParams}, {errSymlink, codeInvalidParams},
	{errIsDir, codeInvalidParams}, {errNotRegular, codeInvalidParams},
	{errNotFound, CodeResourceNotFound}, {errNotDir, CodeResourceNotFound},
	{errDenied, codeInternalError}, {errRace, codeInternalError}, {errMoved, codeInternalError},
}

// pathError maps a resolution or I/O failure to an ACP error naming the
// agent's path and the problem, never the syscall's own text beyond its
// errno name.
func pathError(op, path string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	msg := op + ": " + quote(path) + ": "
	for _, f := range failureCodes {
		if errors.Is(err, f.err) {
			return &Error{Code: f.code, Message: msg + f.err.Error()}
		}
	}
	return &Error{Code: codeInternalError, Message: msg + errnoText(err)}
}

// errnoText names a syscall failure by its errno only.
func errnoText(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return "i/o failure"
}

func tooLarge(path string) error {
	return invalid("read text file: " + quote(path) + ": the content exceeds the " + strconv.Itoa(maxResponseBytes>>20) +
		" MiB response limit; read a range with line and limit")
}

func invalid(msg string) error { return &Error{Code: codeInvalidParams, Message: msg} }

// quote renders the agent's path for a message; it was bounded by locate
// or is shown only up to maxPathBytes.
func quote(path string) string {
	if len(path) > maxPathBytes {
		path = path[:maxPathBytes] + "…"
	}
	b, _ := json.Marshal(path)
	return string(b)
}

// readAll reads a whole file of size bytes (as stat reported it), failing
// with errTooLarge as soon as it holds more than the bound (the file may
// grow while it is read).
func readAll(r io.Reader, size int64) ([]byte, error) {
	n := size + 1 // one more byte shows EOF without a second read
	if n < 512 {
		n = 512
	}
	if n > maxResultBytes+1 {
		n = maxResultBytes + 1
	}
	b := make([]byte, 0, n)
	for {
		if len(b) == cap(b) {
			if len(b) > maxResultBytes {
				return nil, errTooLarge
			}
			b = append(b, 0)[:len(b)] // let append grow the buffer
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if len(b) > maxResultBytes {
			return nil, errTooLarge
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLines streams lines line (1-based, 0 and 1 both mean the first) up
// to limit lines (nil: to the end). A line keeps its newline. It holds at
// most the result plus one chunk.
func readLines(r io.Reader, line, limit *uint32) ([]byte, error) {
	skip := 0
	if line != nil && *line > 1 {
		skip = int(*line) - 1
	}
	want := -1
	if limit != nil {
		want = int(*limit)
	}
	var out []byte
	buf := make([]byte, readChunk)
	for want != 0 {
		n, err := r.Read(buf)
		chunk := buf[:n]
		for len(chunk) > 0 && want != 0 {
			i := bytes.IndexByte(chunk, '\n')
			if skip > 0 {
				if i < 0 {
					chunk = nil
					break
				}
				skip--
				chunk = chunk[i+1:]
				continue
			}
			take := chunk
			if i >= 0 {
				take = chunk[:i+1]
				if want > 0 {
					want--
				}
			}
			chunk = chunk[len(take):]
			out = appendDoubling(out, take)
			if len(out) > maxResultBytes {
				return nil, errTooLarge
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

// appendDoubling appends b to out, growing it by doubling (append grows
// large slices by 1.25×, which costs several times the result in copies).
func appendDoubling(out, b []byte) []byte {
	if need := len(out) + len(b); need > cap(out) {
		n := max(2*cap(out), need, 4096)
		grown := make([]byte, len(out), n)
		copy(grown, out)
		out = grown
	}
	return append(out, b...)
}

// resultOverhead is len(`{"content":""}`).
const resultOverhead = len(`{"content":""}`)

// maxEscape is the longest encoding of one input byte (`\u00XX`, or
// `\ufffd` for an invalid byte).
const maxEscape = 6

// encodedResultLen bounds from above the length encoding/json gives
// readResult{Content: string(b)} (HTML escaping on, as json.Marshal does).
// Content short enough that even six bytes per byte fits is not scanned.
func encodedResultLen(b []byte) int {
	if len(b)*maxEscape+resultOverhead <= maxResultBytes {
		return len(b) + resultOverhead
	}
	n := resultOverhead
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			n += asciiLen[c]
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += maxEscape
		case r == '\u2028' || r == '\u2029':
			n += maxEscape
		default:
			n += size
		}
		i += size
	}
	return n
}

// asciiLen is the encoded length of each ASCII byte, counted as the
// longest form encoding/json may use.
var asciiLen = func() (t [utf8.RuneSelf]int) {
	for c := range t {
		switch {
		case c < 0x20, c == '<', c == '>', c == '&':
			t[c] = maxEscape
		case c == '"', c == '\\':
			t[c] = 2
		default:
			t[c] = 1
		}
	}
	for _, c := range "\n\r\t" {
		t[c] = 2
	}
	return t
}()
