package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxBodyBytes bounds a request body: an agent's request carries its
// whole conversation and tool schemas (Claude Code's are a few hundred
// KiB); 32 MiB leaves room for long sessions.
const maxBodyBytes = 32 << 20

// server is the fake model: its handlers, the request recorder and the
// idle clock.
type server struct {
	ids    atomic.Int64 // deterministic ids: the n-th id of the process
	idle   *idler
	recMu  sync.Mutex
	record io.Writer // NDJSON of the requests, or nil
}

func newServer(idle *idler, record io.Writer) *server {
	return &server{idle: idle, record: record}
}

// nextID returns prefix plus the next number of the process, so ids are
// the same on every run of the same requests.
func (s *server) nextID(prefix string) string {
	return fmt.Sprintf("%s_fakellm_%04d", prefix, s.ids.Add(1))
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "fakellm\n")
	})
	mux.HandleFunc("POST /v1/messages", s.anthropicMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.anthropicCountTokens)
	mux.HandleFunc("POST /v1/responses", s.openaiResponses)
	mux.HandleFunc("POST /v1/chat/completions", s.openaiChat)
	mux.HandleFunc("GET /v1/models", s.openaiModels)
	mux.HandleFunc("POST /v1beta/models/{action}", s.gemini)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.idle.begin()
		defer s.idle.end()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err != nil {
			http.Error(w, "read body: too large or cut", http.StatusRequestEntityTooLarge)
			return
		}
		s.recordRequest(r, body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mux.ServeHTTP(w, r)
	})
}

// secretHeader reports whether a header may carry a credential: the API
// key headers of every API served, cookies, and any name that says so.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"auth", "key", "token", "secret", "cookie", "password"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// recordRequest appends one NDJSON line: method, path, query and headers
// without credentials, and the body (as JSON when it is JSON).
func (s *server) recordRequest(r *http.Request, body []byte) {
	if s.record == nil {
		return
	}
	q := r.URL.Query()
	for k := range q {
		if secretHeader(k) { // Gemini clients may pass ?key=
			q.Del(k)
		}
	}
	h := map[string]string{}
	for k, v := range r.Header {
		if !secretHeader(k) {
			h[k] = strings.Join(v, ", ")
		}
	}
	rec := map[string]any{"method": r.Method, "path": r.URL.Path, "headers": h}
	if len(q) > 0 {
		rec["query"] = q.Encode()
	}
	if json.Valid(body) {
		rec["body"] = json.RawMessage(body)
	} else if len(body) > 0 {
		rec["body"] = string(body)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return
	}
	s.recMu.Lock()
	defer s.recMu.Unlock()
	_, _ = s.record.Write(append(line, '\n'))
}

// readJSON decodes the request body into v, or answers 400.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "decode request: not valid JSON for this API")
		return false
	}
	return true
}

// writeError answers an error in the common {"error": {...}} shape all
// three providers use.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":  "error",
		"error": map[string]any{"type": typ, "message": msg, "code": status, "status": typ},
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes one Server-Sent Events stream.
type sse struct {
	w   http.ResponseWriter
	ctx context.Context
}

func startSSE(w http.ResponseWriter, r *http.Request) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, ctx: r.Context()}
}

// send writes an event (name may be empty: data only) and flushes it.
func (e *sse) send(name string, data any) {
	var b bytes.Buffer
	if name != "" {
		b.WriteString("event: " + name + "\n")
	}
	j, _ := json.Marshal(data)
	b.WriteString("data: ")
	b.Write(j)
	b.WriteString("\n\n")
	e.raw(b.Bytes())
}

func (e *sse) raw(p []byte) {
	_, _ = e.w.Write(p)
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// pause waits d before the next chunk of a slow answer; false when the
// client went away (an interrupted turn), so the stream stops.
func (e *sse) pause(d time.Duration) bool {
	if d <= 0 {
		return e.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.ctx.Done():
		return false
	}
}

// inputTokens is a deterministic token count for usage fields.
func inputTokens(r *http.Request) int {
	if r.ContentLength > 0 {
		return int(r.ContentLength/4) + 1
	}
	return 1
}

// idler fires once no request has been active for d.
type idler struct {
	mu     sync.Mutex
	d      time.Duration
	active int
	timer  *time.Timer
	done   chan struct{}
	closed bool
}

func newIdler(d time.Duration) *idler {
	i := &idler{d: d, done: make(chan struct{})}
	i.timer = time.AfterFunc(d, i.fire)
	return i
}

func (i *idler) fire() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.active == 0 && !i.closed {
		i.closed = true
		close(i.done)
	}
}

func (i *idler) begin() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.active++
	i.timer.Stop()
}

func (i *idler) end() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.active--
	if i.active == 0 {
		i.timer.Reset(i.d)
	}
}

func (i *idler) stop() { i.timer.Stop() }

// openRecord opens the --record file for appending.
func openRecord(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open record: %w", err)
	}
	return f, nil
}
