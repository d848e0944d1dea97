package main

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Gemini API (POST /v1beta/models/{model}:streamGenerateContent?alt=sse
// and :generateContent, :countTokens).

type geminiPart struct {
	Text             string `json:"text"`
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse"`
}

type geminiRequest struct {
	Contents []struct {
		Role  string       `json:"role"`
		Parts []geminiPart `json:"parts"`
	} `json:"contents"`
	Tools []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	GenerationConfig struct {
		ResponseMimeType   string          `json:"responseMimeType"`
		ResponseSchema     json.RawMessage `json:"responseSchema"`
		ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
	} `json:"generationConfig"`
}

func (q *geminiRequest) turn() turn {
	var t turn
	for _, tl := range q.Tools {
		for _, f := range tl.FunctionDeclarations {
			t.tools = append(t.tools, f.Name)
		}
	}
	n := len(q.Contents)
	if n == 0 {
		return t
	}
	var texts, results []string
	for _, p := range q.Contents[n-1].Parts {
		if p.FunctionResponse != nil {
			results = append(results, geminiResult(p.FunctionResponse.Response))
		} else if p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	if len(results) > 0 {
		r := strings.Join(results, "\n")
		t.toolResult = &r
	} else if q.Contents[n-1].Role != "model" {
		t.prompt = strings.Join(texts, "\n")
	}
	return t
}

// geminiResult is a functionResponse's text: its output (or content)
// string when it has one, else its JSON.
func geminiResult(resp json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(resp, &m) == nil {
		for _, k := range []string{"output", "content", "result"} {
			var s string
			if json.Unmarshal(m[k], &s) == nil {
				return s
			}
		}
	}
	return string(resp)
}

func (s *server) gemini(w http.ResponseWriter, r *http.Request) {
	model, method, ok := strings.Cut(r.PathValue("action"), ":")
	if !ok {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "route: want models/{model}:{method}")
		return
	}
	var q geminiRequest
	if !readJSON(w, r, &q) {
		return
	}
	in := inputTokens(r)
	switch method {
	case "countTokens":
		writeJSON(w, map[string]any{"totalTokens": in})
		return
	case "generateContent", "streamGenerateContent":
	default:
		writeError(w, http.StatusNotFound, "NOT_FOUND", "route: unknown method")
		return
	}
	var a answer
	if strings.EqualFold(q.GenerationConfig.ResponseMimeType, "application/json") {
		// A structured side call (Gemini CLI's router): it retries until the
		// answer is JSON matching the schema, so answer a valid instance.
		schema := q.GenerationConfig.ResponseJSONSchema
		if len(schema) == 0 {
			schema = q.GenerationConfig.ResponseSchema
		}
		b, _ := json.Marshal(instanceOf(schema))
		a = answer{chunks: []string{string(b)}}
	} else {
		a = decide(q.turn())
	}
	out := a.outputTokens()
	usage := map[string]any{"promptTokenCount": in, "candidatesTokenCount": out, "totalTokenCount": in + out}
	candidate := func(parts []any, finish string) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		if finish != "" {
			c["finishReason"] = finish
		}
		return c
	}
	var callPart []any
	if a.call != nil {
		callPart = []any{map[string]any{"functionCall": map[string]any{"name": a.call.name, "args": a.call.args}}}
	}
	if method == "generateContent" {
		var parts []any
		if len(a.chunks) > 0 {
			parts = append(parts, map[string]any{"text": a.text()})
		}
		parts = append(parts, callPart...)
		writeJSON(w, map[string]any{"candidates": []any{candidate(parts, "STOP")}, "usageMetadata": usage, "modelVersion": model})
		return
	}
	if r.URL.Query().Get("alt") != "sse" {
		// Without alt=sse the API streams one JSON array; fakellm's clients
		// all ask for SSE, so answer the array whole.
		var parts []any
		for _, c := range a.chunks {
			parts = append(parts, map[string]any{"candidates": []any{candidate([]any{map[string]any{"text": c}}, "")}, "modelVersion": model})
		}
		parts = append(parts, map[string]any{"candidates": []any{candidate(append([]any{}, callPart...), "STOP")}, "usageMetadata": usage, "modelVersion": model})
		writeJSON(w, parts)
		return
	}
	e := startSSE(w, r)
	for i, c := range a.chunks {
		if i > 0 && !e.pause(a.delay) {
			return
		}
		if i == len(a.chunks)-1 && a.call == nil {
			// The last chunk carries the finish reason and the usage, as
			// the API's does.
			e.send("", map[string]any{"candidates": []any{candidate([]any{map[string]any{"text": c}}, "STOP")},
				"usageMetadata": usage, "modelVersion": model})
			return
		}
		e.send("", map[string]any{"candidates": []any{candidate([]any{map[string]any{"text": c}}, "")},
			"usageMetadata": map[string]any{"promptTokenCount": in}, "modelVersion": model})
	}
	e.send("", map[string]any{"candidates": []any{candidate(callPart, "STOP")}, "usageMetadata": usage, "modelVersion": model})
}
