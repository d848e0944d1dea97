package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/quote"
)

// Catalog bounds and names (tools.md §1; reference runner-core
// provider_bridge.rs).
const (
	// Schema is authorizedTools.schema (provider_bridge.rs TOOL_SET_SCHEMA).
	Schema = "paperclip.runner.authorized-tools.v1"
	// FinishTool and BlockTool are the reserved result tools (§4;
	// completion-result.ts PRP_COMPLETION_TOOL_NAME, PRP_BLOCK_TOOL_NAME).
	FinishTool = "paperclip_finish"
	BlockTool  = "paperclip_block"
	// MaxOperations is the most operations a catalog holds (§1,
	// MAX_AUTHORIZED_TOOLS).
	MaxOperations = 256
	// maxOperationIDLen bounds operationId in bytes (§1; validate_stable_id's
	// 160).
	maxOperationIDLen = 160
	// maxDescription bounds a description in UTF-8 bytes (§1,
	// MAX_DESCRIPTION_BYTES).
	maxDescription = 16 << 10
	// listedDescription is where tools/list cuts a description, in UTF-16
	// code units as the reference bridge's slice counts (§2).
	listedDescription = 4096
	// patternTimeout bounds one ECMAScript pattern match (§1).
	patternTimeout = 100 * time.Millisecond
	// maxInputBytes bounds a tool call's encoded arguments (§3 item 2).
	maxInputBytes = 480 << 10
	// maxSchemaBytes bounds one encoded input or response schema
	// (provider_bridge.rs MAX_SCHEMA_BYTES).
	maxSchemaBytes = 512 << 10
)

// schemaVersion is authorizedTools.schemaVersion and every operation's
// version (§1).
const schemaVersion = 1

// Operation is one catalog entry as the server sends it.
type Operation struct {
	OperationID    string          `json:"operationId"`
	Version        int             `json:"version"`
	Description    string          `json:"description"`
	InputSchema    json.RawMessage `json:"inputSchema"`
	ResponseSchema json.RawMessage `json:"responseSchema"`
}

// tool is one tools/list entry.
type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Catalog is a parsed, validated, compiled catalog. It is immutable after
// Parse, so all methods are safe for concurrent use.
type Catalog struct {
	digest string
	ops    map[string]*compiledOp // reserved names excluded
	tools  []tool                 // tools/list, reserved tools last
	// flat maps a flatName that differs from its id back to the id; a
	// flat name that another id, or another id's flat name, also gives is
	// left out (ambiguous).
	flat map[string]string
}

type compiledOp struct {
	input, response *jsonschema.Schema
}

// digestEntry is an operation's five digest fields as raw JSON text, so the
// digest sees the strings as sent (a lone surrogate survives, as in the
// reference's canonical JSON).
type digestEntry struct {
	id                                         string
	operationID, version, description, in, out json.RawMessage
}

// Parse validates run.prepare's authorizedTools (nil, empty or JSON null: the
// empty catalog) per tools.md §1: schema and version, at most MaxOperations
// operations with unique ids matching ^[A-Za-z0-9][A-Za-z0-9_.:-]*$ of at most
// maxOperationIDLen bytes, version 1, a non-empty description of at most
// maxDescription bytes, object schemas of at most maxSchemaBytes that compile
// on their own; then catalogDigest against Digest (a mismatch names both
// digests). A catalog operation named FinishTool or BlockTool counts in the
// digest but is dropped from Tools and Resolve (and its schemas are not
// compiled: nothing validates against them).
func Parse(raw json.RawMessage) (*Catalog, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return build(nil, emptyDigest)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return nil, errors.New("parse catalog: authorizedTools is not a JSON object")
	}
	var schema string
	if json.Unmarshal(top["schema"], &schema) != nil || schema != Schema {
		return nil, fmt.Errorf("parse catalog: schema is not %q", Schema)
	}
	if !isOne(top["schemaVersion"]) {
		return nil, errors.New("parse catalog: schemaVersion is not 1")
	}
	var sent string
	if json.Unmarshal(top["catalogDigest"], &sent) != nil || !isSHA256Digest(sent) {
		return nil, errors.New("parse catalog: catalogDigest is not a sha256 digest")
	}
	var items []json.RawMessage
	if ops := bytes.TrimSpace(top["operations"]); len(ops) > 0 && string(ops) != "null" {
		if json.Unmarshal(ops, &items) != nil {
			return nil, errors.New("parse catalog: operations is not an array")
		}
	}
	if len(items) > MaxOperations {
		return nil, fmt.Errorf("parse catalog: %d operations, more than %d", len(items), MaxOperations)
	}
	entries := make([]digestEntry, 0, len(items))
	seen := make(map[string]bool, len(items))
	for i, item := range items {
		e, err := parseEntry(i, item)
		if err != nil {
			return nil, err
		}
		if seen[e.id] {
			return nil, fmt.Errorf("parse catalog: operation %s appears twice", quote.Text(e.id))
		}
		seen[e.id] = true
		entries = append(entries, e)
	}
	got, err := digestEntries(entries)
	if err != nil {
		return nil, err
	}
	if got != sent {
		return nil, fmt.Errorf("parse catalog: catalogDigest %s does not match the operations' digest %s", sent, got)
	}
	return build(entries, got)
}

// parseEntry checks operation i's fields and bounds; it neither decodes nor
// compiles the schemas.
func parseEntry(i int, item json.RawMessage) (digestEntry, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(item, &m); err != nil || m == nil {
		return digestEntry{}, fmt.Errorf("parse catalog: operation %d is not a JSON object", i)
	}
	var id string
	if json.Unmarshal(m["operationId"], &id) != nil || !validOperationID(id) {
		return digestEntry{}, fmt.Errorf("parse catalog: operation %d has no valid operationId (^[A-Za-z0-9][A-Za-z0-9_.:-]*$, at most %d bytes)", i, maxOperationIDLen)
	}
	if !isOne(m["version"]) {
		return digestEntry{}, fmt.Errorf("parse catalog: operation %s: version is not 1", quote.Text(id))
	}
	var desc string
	if json.Unmarshal(m["description"], &desc) != nil {
		return digestEntry{}, fmt.Errorf("parse catalog: operation %s: description is not a string", quote.Text(id))
	}
	if desc == "" {
		return digestEntry{}, fmt.Errorf("parse catalog: operation %s: description is empty", quote.Text(id))
	}
	if len(desc) > maxDescription {
		return digestEntry{}, fmt.Errorf("parse catalog: operation %s: description is longer than %d bytes", quote.Text(id), maxDescription)
	}
	for _, name := range []string{"inputSchema", "responseSchema"} {
		s := bytes.TrimSpace(m[name])
		if len(s) == 0 || s[0] != '{' {
			return digestEntry{}, fmt.Errorf("parse catalog: operation %s: %s is not a JSON object", quote.Text(id), name)
		}
		if len(s) > maxSchemaBytes {
			return digestEntry{}, fmt.Errorf("parse catalog: operation %s: %s is larger than %d bytes", quote.Text(id), name, maxSchemaBytes)
		}
	}
	return digestEntry{
		id: id, operationID: m["operationId"], version: m["version"], description: m["description"],
		in: m["inputSchema"], out: m["responseSchema"],
	}, nil
}

// emptyDigest is the empty catalog's digest: sha256 of "[]".
const emptyDigest = "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"

// build compiles the non-reserved operations and lays out tools/list.
func build(entries []digestEntry, digest string) (*Catalog, error) {
	c := &Catalog{digest: digest, ops: make(map[string]*compiledOp, len(entries))}
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b digestEntry) int { return strings.Compare(a.id, b.id) })
	for _, e := range sorted {
		if isReserved(e.id) {
			continue
		}
		in, err := compileSchema(e.id, "input", e.in)
		if err != nil {
			return nil, err
		}
		out, err := compileSchema(e.id, "response", e.out)
		if err != nil {
			return nil, err
		}
		c.ops[e.id] = &compiledOp{input: in, response: out}
		var desc string
		_ = json.Unmarshal(e.description, &desc) // checked by parseEntry
		c.tools = append(c.tools, tool{Name: e.id, Description: cutUTF16(desc, listedDescription), InputSchema: compactOrSelf(e.in)})
	}
	c.tools = append(c.tools, reservedTools()...)
	c.flat = flatNames(c.ops)
	return c, nil
}

// flatName is operation id as a model API that allows only [A-Za-z0-9_-]
// in tool names must see it (OpenAI's Responses API; Codex refuses any
// other dynamic tool name): every other byte becomes '_'. Resolve maps it
// back when exactly one operation gives it.
func flatName(id string) string {
	b := []byte(id)
	for i, ch := range b {
		if !isAlnum(ch) && ch != '_' && ch != '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

// FlatNameOf is flatName(id) when Resolve maps it back to id; ok is false
// for an id whose flat name is ambiguous.
func (c *Catalog) FlatNameOf(id string) (string, bool) {
	f := flatName(id)
	if f == id {
		return f, true
	}
	return f, c.flat[f] == id
}

func flatNames(ops map[string]*compiledOp) map[string]string {
	flat := map[string]string{}
	ambiguous := map[string]bool{}
	for id := range ops {
		f := flatName(id)
		if f == id {
			continue
		}
		if _, taken := ops[f]; taken || flat[f] != "" {
			ambiguous[f] = true
		}
		flat[f] = id
	}
	for f := range ambiguous {
		delete(flat, f)
	}
	return flat
}

// Digest is the catalog digest of ops: "sha256:" + hex(sha256(canonical JSON
// of the operations sorted by operationId, each {operationId, version,
// description, inputSchema, responseSchema})), canonical JSON as prp.md
// §2.2 without its node bound (the reference runner has none). It returns ""
// when a schema is not JSON.
func Digest(ops []Operation) string {
	entries := make([]digestEntry, 0, len(ops))
	for _, op := range ops {
		id, err1 := json.Marshal(op.OperationID)
		desc, err2 := json.Marshal(op.Description)
		if err1 != nil || err2 != nil {
			return ""
		}
		entries = append(entries, digestEntry{
			id: op.OperationID, operationID: id, version: json.RawMessage(fmt.Sprint(op.Version)),
			description: desc, in: op.InputSchema, out: op.ResponseSchema,
		})
	}
	d, err := digestEntries(entries)
	if err != nil {
		return ""
	}
	return d
}

func digestEntries(entries []digestEntry) (string, error) {
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b digestEntry) int { return strings.Compare(a.id, b.id) })
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, e := range sorted {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"operationId":`)
		buf.Write(e.operationID)
		buf.WriteString(`,"version":`)
		buf.Write(e.version)
		buf.WriteString(`,"description":`)
		buf.Write(e.description)
		buf.WriteString(`,"inputSchema":`)
		buf.Write(orNull(e.in))
		buf.WriteString(`,"responseSchema":`)
		buf.Write(orNull(e.out))
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	canon, err := prp.CanonicalUnbounded(json.RawMessage(buf.Bytes()))
	if err != nil {
		return "", errors.New("digest catalog: the operations are not canonical JSON (invalid text or nested too deep)")
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// Digest returns the catalog digest (the empty catalog's when it has no
// operations).
func (c *Catalog) Digest() string { return c.digest }

// Len is the number of catalog operations the agent sees (reserved names
// excluded).
func (c *Catalog) Len() int { return len(c.ops) }

// Resolve maps a tools/call name to an operation id: an exact catalog name;
// else FinishTool or BlockTool exactly (before prefix stripping, so a catalog
// operation "finish" never shadows paperclip_finish); else the name with one
// leading "paperclip__", "paperclip_" or "paperclip." stripped when the rest
// is a catalog name (Claude calls mcp__paperclip__X); else ok=false. A name
// holding a NUL or any control character, or invalid UTF-8, is ok=false.
func (c *Catalog) Resolve(name string) (operationID string, ok bool) {
	if !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return "", false
	}
	if _, ok := c.ops[name]; ok {
		return name, true
	}
	if isReserved(name) {
		return name, true
	}
	for _, p := range []string{"paperclip__", "paperclip_", "paperclip."} {
		if rest, found := strings.CutPrefix(name, p); found {
			if _, ok := c.ops[rest]; ok {
				return rest, true
			}
			break // one prefix only: "paperclip__x" is never retried as "_x"
		}
	}
	if id, ok := c.flat[name]; ok {
		return id, true
	}
	return "", false
}

// Tools lists what tools/list returns: the catalog operations sorted by id
// (description cut to listedDescription UTF-16 units), then FinishTool and
// BlockTool. The slice is a copy; the InputSchema bytes are shared and must
// not be modified.
func (c *Catalog) Tools() []tool { return slices.Clone(c.tools) }

// validOperationID reports whether id is a valid operationId (§1).
func validOperationID(id string) bool {
	if id == "" || len(id) > maxOperationIDLen || !isAlnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if b := id[i]; !isAlnum(b) && b != '_' && b != '.' && b != ':' && b != '-' {
			return false
		}
	}
	return true
}

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

func isReserved(id string) bool { return id == FinishTool || id == BlockTool }

// isOne reports whether raw is the JSON number 1 (1, 1.0 and 1e0 alike, as
// JSON.parse reads them).
func isOne(raw json.RawMessage) bool {
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return false
	}
	f, err := n.Float64()
	return err == nil && f == schemaVersion
}

func isSHA256Digest(s string) bool {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for i := range len(hexPart) {
		if b := hexPart[i]; !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f') {
			return false
		}
	}
	return true
}

// cutUTF16 cuts s to at most n UTF-16 code units, never inside a surrogate
// pair.
func cutUTF16(s string, n int) string {
	units := 0
	for i, r := range s {
		w := utf16.RuneLen(r)
		if w < 0 {
			w = 1
		}
		if units+w > n {
			return s[:i]
		}
		units += w
	}
	return s
}

func compactOrSelf(b json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

func sortStrings(s []string) { slices.Sort(s) }
