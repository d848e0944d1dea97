package main

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
)

// maxBody bounds a request body.
const maxBody = 4 << 20

// subscriberBuffer is each event stream's queue; a stream that falls
// this far behind is closed (its client recovers from the message list).
const subscriberBuffer = 4096

type server struct {
	user, password string
	activity       chan struct{}

	recMu sync.Mutex
	rec   *os.File

	mu       sync.Mutex
	seq      int64
	clock    int64
	sessions map[string]*session
	order    []string
	subs     map[*subscriber]struct{}
	perms    map[string]chan string    // pending permission id → reply
	asks     map[string]map[string]any // pending permission id → its request
	askOrder []string
}

type subscriber struct {
	ch     chan []byte
	closed chan struct{}
	once   sync.Once
}

func (s *subscriber) close() { s.once.Do(func() { close(s.closed) }) }

type session struct {
	info     map[string]any
	messages []*message
	busy     bool
	abort    chan struct{}
	done     chan struct{}
}

type message struct {
	info  map[string]any
	parts []map[string]any
}

func newServer(cfg config, user, password string) (*server, error) {
	if user == "" {
		user = "opencode"
	}
	s := &server{user: user, password: password, activity: make(chan struct{}, 1),
		sessions: map[string]*session{}, subs: map[*subscriber]struct{}{}, perms: map[string]chan string{}, asks: map[string]map[string]any{},
		clock: 1_700_000_000_000}
	if cfg.record != "" {
		f, err := os.OpenFile(cfg.record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open record: %w", err)
		}
		s.rec = f
	}
	return s, nil
}

func (s *server) close() {
	if s.rec != nil {
		s.rec.Close()
	}
}

// id returns the next ascending id with prefix p (OpenCode's ids ascend
// too: runnerd relies on it).
func (s *server) idLocked(p string) string {
	s.seq++
	return fmt.Sprintf("%s_%012x%s", p, s.seq, "fakeopencode00")
}

// nowLocked is the fake clock: every reading is one ms later.
func (s *server) nowLocked() int64 {
	s.clock++
	return s.clock
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /session", s.createSession)
	mux.HandleFunc("POST /session/{id}/prompt_async", s.promptAsync)
	mux.HandleFunc("POST /session/{id}/abort", s.abortSession)
	mux.HandleFunc("GET /session/{id}/message", s.listMessages)
	mux.HandleFunc("GET /session/status", s.status)
	mux.HandleFunc("GET /permission", s.listPermissions)
	mux.HandleFunc("POST /permission/{id}/reply", s.replyPermission)
	mux.HandleFunc("GET /event", s.events)
	return s.auth(mux)
}

// auth checks basic auth as OpenCode does when a password is set.
func (s *server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.activity <- struct{}{}:
		default:
		}
		if s.password != "" {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(s.user)) != 1 ||
				subtle.ConstantTimeCompare([]byte(p), []byte(s.password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="Secure Area"`)
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads and records a request body (never the auth header).
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	var b []byte
	if r.Body != nil {
		var err error
		b, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return nil, false
		}
	}
	if s.rec != nil {
		line := map[string]any{"method": r.Method, "path": r.URL.Path}
		if len(b) > 0 && json.Valid(b) {
			line["body"] = json.RawMessage(b)
		}
		enc, _ := json.Marshal(line)
		s.recMu.Lock()
		s.rec.Write(append(enc, '\n'))
		s.recMu.Unlock()
	}
	return b, true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, what string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	json.NewEncoder(w).Encode(map[string]any{"name": "NotFoundError", "data": map[string]string{"message": what + " not found"}})
}

func badRequest(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"name": "BadRequest", "data": map[string]string{"message": msg}})
}

func (s *server) createSession(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var body map[string]json.RawMessage
	if len(b) > 0 && json.Unmarshal(b, &body) != nil {
		badRequest(w, "body is not an object")
		return
	}
	for k := range body {
		switch k {
		case "parentID", "title", "agent", "model", "metadata", "permission", "workspaceID":
		default:
			badRequest(w, "unknown field "+k)
			return
		}
	}
	title := "New session"
	if t, ok := body["title"]; ok {
		json.Unmarshal(t, &title)
	}
	cwd, _ := os.Getwd()
	s.mu.Lock()
	id := s.idLocked("ses")
	now := s.nowLocked()
	info := map[string]any{"id": id, "slug": "fake", "projectID": "global", "directory": cwd, "title": title,
		"version": "1.18.33-fake", "time": map[string]any{"created": now, "updated": now}}
	s.sessions[id] = &session{info: info}
	s.order = append(s.order, id)
	s.publishLocked("session.created", map[string]any{"sessionID": id, "info": info})
	s.mu.Unlock()
	writeJSON(w, info)
}

func (s *server) listMessages(w http.ResponseWriter, r *http.Request) {
	s.readBody(w, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[r.PathValue("id")]
	if !ok {
		notFound(w, "session")
		return
	}
	out := []map[string]any{}
	for _, m := range ss.messages {
		out = append(out, map[string]any{"info": m.info, "parts": m.parts})
	}
	writeJSON(w, out)
}

func (s *server) status(w http.ResponseWriter, r *http.Request) {
	s.readBody(w, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]any{}
	for id, ss := range s.sessions {
		if ss.busy {
			out[id] = map[string]string{"type": "busy"}
		}
	}
	writeJSON(w, out)
}

func (s *server) abortSession(w http.ResponseWriter, r *http.Request) {
	s.readBody(w, r)
	s.mu.Lock()
	ss, ok := s.sessions[r.PathValue("id")]
	if !ok {
		s.mu.Unlock()
		notFound(w, "session")
		return
	}
	var done chan struct{}
	if ss.busy && ss.abort != nil {
		select {
		case <-ss.abort:
		default:
			close(ss.abort)
		}
		done = ss.done
	}
	s.mu.Unlock()
	if done != nil {
		<-done // OpenCode answers once the turn has stopped
	}
	writeJSON(w, true)
}

func (s *server) replyPermission(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var body struct {
		Reply   string `json:"reply"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) != nil {
		badRequest(w, "body is not an object")
		return
	}
	switch body.Reply {
	case "once", "always", "reject":
	default:
		badRequest(w, "reply must be once, always or reject")
		return
	}
	s.mu.Lock()
	ch, ok := s.perms[r.PathValue("id")]
	delete(s.perms, r.PathValue("id"))
	delete(s.asks, r.PathValue("id"))
	s.mu.Unlock()
	if !ok {
		notFound(w, "permission")
		return
	}
	ch <- body.Reply
	writeJSON(w, true)
}

// listPermissions is GET /permission: the pending requests, oldest
// first.
func (s *server) listPermissions(w http.ResponseWriter, r *http.Request) {
	s.readBody(w, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, id := range s.askOrder {
		if a, ok := s.asks[id]; ok {
			out = append(out, a)
		}
	}
	writeJSON(w, out)
}

// events is GET /event: server.connected, then every event published
// while the stream is open. No replay: what happened before is in the
// message list only.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "no streaming", http.StatusInternalServerError)
		return
	}
	sub := &subscriber{ch: make(chan []byte, subscriberBuffer), closed: make(chan struct{})}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	first := s.eventLocked("server.connected", map[string]any{})
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.WriteHeader(http.StatusOK)
	w.Write(first)
	fl.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.closed:
			return
		case b := <-sub.ch:
			// What is queued goes out with it in one flush, as a server
			// writing a burst does.
			for more := true; more; {
				if _, err := w.Write(b); err != nil {
					return
				}
				select {
				case b = <-sub.ch:
				default:
					more = false
				}
			}
			fl.Flush()
		}
	}
}

// eventLocked frames one event.
func (s *server) eventLocked(typ string, props map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"id": s.idLocked("evt"), "type": typ, "properties": props})
	return []byte("data: " + string(b) + "\n\n")
}

// publishLocked sends an event to every open stream.
func (s *server) publishLocked(typ string, props map[string]any) {
	b := s.eventLocked(typ, props)
	for sub := range s.subs {
		select {
		case sub.ch <- b:
		default:
			sub.close()
			delete(s.subs, sub)
		}
	}
}

// closeStreams ends every open event stream (the drop directive, and
// shutdown).
func (s *server) closeStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeStreamsLocked()
}

func (s *server) closeStreamsLocked() {
	for sub := range s.subs {
		sub.close()
		delete(s.subs, sub)
	}
}

// directive returns the prompt's FAKEOC directive words.
func directive(text string) []string {
	i := strings.Index(text, "FAKEOC:")
	if i < 0 {
		return nil
	}
	line := text[i+len("FAKEOC:"):]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return strings.Fields(line)
}
