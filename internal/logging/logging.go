// Package logging holds the slog handler the binaries build their loggers
// on. Packages name themselves with the usual
// logger.With("component", name) (STYLE.md); this handler joins a derived
// logger's component to its parent's, so a line carries one "component" key
// ("runnerd.agent.acpx") instead of one per layer, which JSON readers either
// reject or resolve to whichever duplicate they see last.
package logging

import (
	"context"
	"log/slog"
)

// componentKey is the attribute key that names the logging component.
const componentKey = "component"

// componentSep joins a parent component to a child's.
const componentSep = "."

// New returns a logger on h whose component attributes join (newHandler).
func New(h slog.Handler) *slog.Logger { return slog.New(newHandler(h)) }

// newHandler wraps h so that a top-level "component" attribute given to
// WithAttrs (slog.Logger.With) is joined to the component already set,
// rather than added again. Everything else passes through to h unchanged.
func newHandler(h slog.Handler) slog.Handler {
	if c, ok := h.(*handler); ok {
		return c
	}
	return &handler{base: h, built: h}
}

// handler keeps the wrapped handler without any component (base), the
// joined component name, and the WithAttrs and WithGroup steps taken since
// (after), so that a later component can be put in front of them again.
// built is base with the component and every step applied; it does the
// work. Values are immutable once made, as slog requires.
type handler struct {
	base      slog.Handler
	component string
	after     []step
	groups    int // groups opened so far: a "component" inside one is an ordinary attribute
	built     slog.Handler
}

// step is one WithGroup (group != "") or WithAttrs call.
type step struct {
	group string
	attrs []slog.Attr
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.built.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error { return h.built.Handle(ctx, r) }

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	name, rest := h.component, attrs
	if h.groups == 0 {
		rest = make([]slog.Attr, 0, len(attrs))
		for _, a := range attrs {
			if a.Key != componentKey {
				rest = append(rest, a)
				continue
			}
			if v := a.Value.Resolve().String(); v != "" {
				if name != "" {
					name += componentSep
				}
				name += v
			}
		}
	}
	n := &handler{base: h.base, component: name, groups: h.groups, after: h.after}
	if len(rest) > 0 {
		n.after = append(append([]step(nil), h.after...), step{attrs: rest})
	}
	if name == h.component {
		n.built = h.built.WithAttrs(rest)
		return n
	}
	n.rebuild()
	return n
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{
		base: h.base, component: h.component, groups: h.groups + 1,
		after: append(append([]step(nil), h.after...), step{group: name}),
		built: h.built.WithGroup(name),
	}
}

// rebuild applies the component and then every later step to base.
func (h *handler) rebuild() {
	b := h.base
	if h.component != "" {
		b = b.WithAttrs([]slog.Attr{slog.String(componentKey, h.component)})
	}
	for _, s := range h.after {
		if s.group != "" {
			b = b.WithGroup(s.group)
		} else {
			b = b.WithAttrs(s.attrs)
		}
	}
	h.built = b
}
