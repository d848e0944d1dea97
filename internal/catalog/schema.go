package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// maxErrorPath bounds the instance path quoted in a validation error, so an
// agent's long keys cannot make the tool error large.
const maxErrorPath = 256

// noLoader refuses every schema resource outside the document: a `$ref` to
// another document, a file or a URL fails compilation (§1). The metaschemas
// the library embeds are not loaded through it.
type noLoader struct{}

var errOutsideRef = errors.New("a $ref or $schema outside the document")

func (noLoader) Load(string) (any, error) { return nil, errOutsideRef }

// ecmaRegexp is a pattern compiled as an ECMAScript regular expression with
// the u flag (the server compiles patterns with Ajv, whose unicodeRegExp
// option is on by default), bounded by patternTimeout. The bound is wall
// clock, and a loaded machine can deschedule even a trivial match for that
// long, so a match that times out is tried once more; a second timeout
// counts as no match: the input is refused rather than waited on.
type ecmaRegexp struct{ re *regexp2.Regexp }

func (r ecmaRegexp) MatchString(s string) bool {
	ok, err := r.re.MatchString(s)
	if err != nil {
		ok, err = r.re.MatchString(s)
	}
	return err == nil && ok
}

func (r ecmaRegexp) String() string { return r.re.String() }

func compileECMAScript(s string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(s, regexp2.ECMAScript|regexp2.Unicode)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = patternTimeout
	return ecmaRegexp{re}, nil
}

// formatNames are the formats the library asserts for draft-07 and earlier.
// They are replaced by no-ops: Ajv without ajv-formats asserts none. ("regex"
// cannot be replaced; it is checked with the ECMAScript engine.)
var formatNames = []string{
	"json-pointer", "relative-json-pointer", "uuid", "duration", "period", "ipv4", "ipv6",
	"hostname", "email", "date", "time", "date-time", "uri", "iri", "uri-reference",
	"iri-reference", "uri-template", "semver", "idn-email", "idn-hostname",
}

func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	c.UseRegexpEngine(compileECMAScript)
	for _, name := range formatNames {
		c.RegisterFormat(&jsonschema.Format{Name: name, Validate: func(any) error { return nil }})
	}
	return c
}

// schemaURL is the base URI a schema compiles under (§1).
func schemaURL(id, which string) string { return "urn:paperclip:op:" + id + ":" + which }

// compileSchema compiles one schema on its own compiler, so no `$ref` can
// reach another operation's schema. The error names the operation and the
// kind of problem, never the schema text.
func compileSchema(id, which string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse catalog: operation %s: %sSchema is not JSON", quote.Text(id), which)
	}
	c := newCompiler()
	url := schemaURL(id, which)
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("parse catalog: operation %s: %sSchema does not compile", quote.Text(id), which)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("parse catalog: operation %s: %sSchema does not compile: %s", quote.Text(id), which, compileProblem(err))
	}
	return sch, nil
}

// compileProblem names the class of a compile error without its text (which
// quotes schema values).
func compileProblem(err error) string {
	var (
		load  *jsonschema.LoadURLError
		draft *jsonschema.UnsupportedDraftError
		meta  *jsonschema.SchemaValidationError
		re    *jsonschema.InvalidRegexError
	)
	switch {
	case errors.As(err, &load) || errors.Is(err, errOutsideRef):
		return "it refers outside its own document"
	case errors.As(err, &draft):
		return "unsupported $schema"
	case errors.As(err, &re):
		return "a pattern is not an ECMAScript regular expression"
	case errors.As(err, &meta):
		return "it is not valid against its metaschema"
	default:
		return "invalid schema"
	}
}

// validate checks raw JSON against sch and returns the first error's
// message (instance path and keyword message, never the value), or "".
func validate(sch *jsonschema.Schema, raw json.RawMessage) (string, bool) {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return "the value is not JSON", false
	}
	return validateValue(sch, inst)
}

func validateValue(sch *jsonschema.Schema, inst any) (string, bool) {
	err := sch.Validate(inst)
	if err == nil {
		return "", true
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return "the value does not validate", false
	}
	return describe(firstLeaf(ve)), false
}

// firstLeaf picks a deterministic "first" error: the library visits object
// properties in map order, so the leaf with the smallest instance location,
// then keyword location, is chosen.
func firstLeaf(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	var leaves []*jsonschema.ValidationError
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return slices.MinFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		if c := slices.Compare(a.InstanceLocation, b.InstanceLocation); c != 0 {
			return c
		}
		return strings.Compare(keywordLoc(a), keywordLoc(b))
	})
}

func keywordLoc(e *jsonschema.ValidationError) string {
	return e.SchemaURL + "/" + strings.Join(e.ErrorKind.KeywordPath(), "/")
}

// describe writes `at "<instance pointer>": <message>`.
func describe(e *jsonschema.ValidationError) string {
	var p strings.Builder
	for _, tok := range e.InstanceLocation {
		p.WriteByte('/')
		p.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(tok))
	}
	path := p.String()
	if len(path) > maxErrorPath {
		path = cutUTF16(path, maxErrorPath) + "…"
	}
	where := "at the root"
	if path != "" {
		where = fmt.Sprintf("at %s", quote.Text(path))
	}
	return where + ": " + kindMessage(e.ErrorKind)
}

// kindMessage is the keyword message without the value: the library's own
// texts quote the value for enum, const, pattern, format and the numeric
// bounds, so those are written here.
func kindMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Enum:
		return "value is not one of the allowed values"
	case *kind.Const:
		return "value is not the allowed constant"
	case *kind.Pattern:
		return "value does not match the pattern"
	case *kind.Format:
		return fmt.Sprintf("value is not a valid %s", quote.Text(k.Want))
	case *kind.Minimum:
		return fmt.Sprintf("value must be >= %s", k.Want.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("value must be <= %s", k.Want.RatString())
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("value must be > %s", k.Want.RatString())
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("value must be < %s", k.Want.RatString())
	case *kind.MultipleOf:
		return fmt.Sprintf("value must be a multiple of %s", k.Want.RatString())
	case *kind.Type:
		return fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.Required:
		return "missing " + plural(len(k.Missing), "property", "properties") + " " + quoteList(k.Missing)
	case *kind.Dependency:
		return fmt.Sprintf("properties %s required by %s are missing", quoteList(k.Missing), quote.Text(k.Prop))
	case *kind.DependentRequired:
		return fmt.Sprintf("properties %s required by %s are missing", quoteList(k.Missing), quote.Text(k.Prop))
	case *kind.AdditionalProperties:
		return "additional " + plural(len(k.Properties), "property", "properties") + " " + quoteList(k.Properties) + " not allowed"
	case *kind.PropertyNames:
		return fmt.Sprintf("invalid property name %s", quote.Text(k.Property))
	case *kind.MinLength:
		return fmt.Sprintf("length must be >= %d", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("length must be <= %d", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have >= %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must have <= %d items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("must have >= %d properties", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have <= %d properties", k.Want)
	case *kind.AdditionalItems:
		return fmt.Sprintf("last %d additional items not allowed", k.Count)
	case *kind.UniqueItems:
		return fmt.Sprintf("items at %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		return "no item matches contains"
	case *kind.MinContains:
		return fmt.Sprintf("must contain >= %d matching items", k.Want)
	case *kind.MaxContains:
		return fmt.Sprintf("must contain <= %d matching items", k.Want)
	case *kind.FalseSchema:
		return "not allowed (false schema)"
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return "oneOf failed: no subschema matches"
		}
		return "oneOf failed: more than one subschema matches"
	case *kind.AnyOf:
		return "anyOf failed: no subschema matches"
	case *kind.AllOf:
		return "allOf failed"
	case *kind.Not:
		return "not failed"
	default:
		path := k.KeywordPath()
		if len(path) == 0 {
			return "value does not validate"
		}
		return fmt.Sprintf("keyword %s failed", quote.Text(path[len(path)-1]))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// quoteList quotes names (property names: keys, never values), at most 8.
func quoteList(names []string) string {
	const maxNames = 8
	q := make([]string, 0, min(len(names), maxNames))
	for i, n := range names {
		if i == maxNames {
			q = append(q, "…")
			break
		}
		q = append(q, quote.Text(n))
	}
	return strings.Join(q, ", ")
}
