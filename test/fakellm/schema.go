package main

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
)

// Bounds of a generated instance: a schema asking for more is answered
// with the bound, which a real schema of a side call never reaches.
const (
	maxInstanceDepth = 32
	maxInstanceItems = 16
	maxInstanceChars = 1024
	maxInstanceNodes = 10000 // a recursive schema must not grow 16^32 nodes
)

// instanceFiller is the string a generated instance holds where the schema
// allows any text.
const instanceFiller = "fakellm"

// instanceOf returns a minimal instance of schema, a JSON Schema or the
// Gemini API's OpenAPI subset (types in upper case): only required
// properties, an enum's first value, the smallest allowed numbers and
// lengths. A missing schema gives an empty object.
func instanceOf(schema json.RawMessage) any {
	var root map[string]any
	if json.Unmarshal(schema, &root) != nil || root == nil {
		return map[string]any{}
	}
	g := &generator{root: root}
	return g.instance(root, 0)
}

// generator makes one instance, counting the nodes made.
type generator struct {
	root  map[string]any
	nodes int
}

func (g *generator) instance(s map[string]any, depth int) any {
	g.nodes++
	if depth > maxInstanceDepth || g.nodes > maxInstanceNodes {
		return nil
	}
	root := g.root
	if ref, ok := s["$ref"].(string); ok {
		if t := resolveRef(ref, root); t != nil {
			return g.instance(t, depth+1)
		}
	}
	if v, ok := s["const"]; ok {
		return v
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			if alt, ok := alts[0].(map[string]any); ok {
				return g.instance(alt, depth+1)
			}
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		merged := map[string]any{}
		for _, part := range all {
			if m, ok := part.(map[string]any); ok {
				mergeSchema(merged, m)
			}
		}
		mergeSchema(merged, s)
		delete(merged, "allOf")
		return g.instance(merged, depth+1)
	}
	switch schemaType(s) {
	case "object":
		obj := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		for _, r := range req {
			name, _ := r.(string)
			p, _ := props[name].(map[string]any)
			obj[name] = g.instance(p, depth+1)
		}
		return obj
	case "array":
		n := min(intOf(s["minItems"], 0), maxInstanceItems)
		items, _ := s["items"].(map[string]any)
		arr := make([]any, 0, n)
		for range n {
			arr = append(arr, g.instance(items, depth+1))
		}
		return arr
	case "string":
		str := instanceFiller
		if n := min(intOf(s["minLength"], 0), maxInstanceChars); n > len(str) {
			str += strings.Repeat("x", n-len(str))
		}
		if m, ok := s["maxLength"]; ok {
			str = str[:min(len(str), max(intOf(m, 0), 0))]
		}
		return str
	case "integer":
		return math.Round(number(s, true))
	case "number":
		return number(s, false)
	case "boolean":
		return false
	case "null":
		return nil
	default:
		if _, ok := s["properties"]; ok {
			s2 := map[string]any{"type": "object"}
			mergeSchema(s2, s)
			s2["type"] = "object"
			return g.instance(s2, depth+1)
		}
		return instanceFiller
	}
}

// schemaType is s's type in lower case; of a type list, the first one
// that is not null.
func schemaType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return strings.ToLower(t)
	case []any:
		for _, x := range t {
			if str, ok := x.(string); ok && !strings.EqualFold(str, "null") {
				return strings.ToLower(str)
			}
		}
		return "null"
	}
	return ""
}

// instanceNumber is the number an instance holds where the schema allows
// it: 1, not 0, because clients check ranges the schema only describes
// (Gemini CLI's router asks for an INTEGER "score from 1-100" and refuses 0).
const instanceNumber = 1.0

// number is instanceNumber, or the nearest value s's bounds allow.
func number(s map[string]any, integer bool) float64 {
	v := instanceNumber
	step := 1e-6
	if integer {
		step = 1
	}
	if m, ok := s["minimum"].(float64); ok && v < m {
		v = m
	}
	if m, ok := s["exclusiveMinimum"].(float64); ok && v <= m {
		v = m + step
	}
	if integer {
		v = math.Ceil(v)
	}
	if m, ok := s["maximum"].(float64); ok && v > m {
		v = m
	}
	if m, ok := s["exclusiveMaximum"].(float64); ok && v >= m {
		v = m - step
	}
	if integer {
		v = math.Floor(v)
	}
	return v
}

func intOf(v any, def int) int {
	if f, ok := v.(float64); ok {
		return int(f)
	}
	if str, ok := v.(string); ok { // the OpenAPI subset writes int64 as strings
		var n json.Number = json.Number(str)
		if i, err := n.Int64(); err == nil {
			return int(i)
		}
	}
	return def
}

// resolveRef finds a local reference (#/$defs/x, #/definitions/x).
func resolveRef(ref string, root map[string]any) map[string]any {
	path, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	var cur any = root
	for _, seg := range strings.Split(path, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")]
	}
	m, _ := cur.(map[string]any)
	return m
}

// mergeSchema merges src into dst: properties and required are unioned,
// other keys copied.
func mergeSchema(dst, src map[string]any) {
	for k, v := range src {
		switch k {
		case "properties":
			p, _ := dst["properties"].(map[string]any)
			if p == nil {
				p = map[string]any{}
			}
			if sp, ok := v.(map[string]any); ok {
				for name, ps := range sp {
					p[name] = ps
				}
			}
			dst["properties"] = p
		case "required":
			r, _ := dst["required"].([]any)
			if sr, ok := v.([]any); ok {
				for _, x := range sr {
					if !slices.Contains(r, x) {
						r = append(r, x)
					}
				}
			}
			dst["required"] = r
		default:
			dst[k] = v
		}
	}
}
