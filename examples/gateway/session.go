package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentserve/sessionaffinity/affinity"
)

// generationCall reports whether r is a generation call: a POST to a generation endpoint
// (a path ending in /chat/completions, /completions, /responses or /messages; a trailing
// slash is ignored). Only generation calls bind a session (Decision: they are what a
// warm prefix cache serves), and require_session applies to them alone. Everything else
// — GET /v1/models, /health, /version, /tokenize, embeddings, a path the backend
// answers 404 — has no session to keep: without a session it is routed without one even
// when require_session is set, and with one it is hashed by it without a binding
// (unbind).
func generationCall(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	p := strings.TrimSuffix(r.URL.Path, "/")
	for _, suffix := range [...]string{"/chat/completions", "/completions", "/responses", "/messages"} {
		if strings.HasSuffix(p, suffix) {
			return true
		}
	}
	return false
}

// unbind routes st, a request with a session that is not a generation call
// (generationCall), like a request without a session keyed by its session ID (the
// tenant-scoped one, when tenant scoping is on): HRW by the session over the tier's
// backends that are not Down (usually the backend its binding names, unless the session
// was spilled or rebound), leased with LeaseBackend; no binding is read or written, no
// hit or miss is counted, the parent header is ignored, and the response carries no
// X-Agent-Serve-Outcome. Decision: otherwise every GET /v1/models or mistyped path with
// a fresh session ID stored a binding, and the binding table (max_bindings, shared by
// every tenant) could be flushed cheaply by one client. The session ID is still held to
// max_session_id_bytes as on a generation call (an error wrapping
// affinity.ErrSessionIDTooLong; with tenant scoping scopeSession has checked it).
func (st *route) unbind() error {
	if st.rt.tenants == nil {
		if err := checkSessionID(st.session, st.rt.cfg.maxSessionIDBytes()); err != nil {
			return err
		}
	}
	st.key, st.session, st.parent = st.session, "", ""
	return nil
}

// checkSessionID returns an error wrapping affinity.ErrSessionIDTooLong when the
// session ID the client sent is over max bytes (its length and first 32 bytes quoted),
// else nil.
func checkSessionID(session string, max int) error {
	if len(session) > max {
		return fmt.Errorf("%w: %d bytes (max %d): %q...", affinity.ErrSessionIDTooLong, len(session), max, session[:min(32, max)])
	}
	return nil
}

// sessionID returns the first non-empty session_headers value ("" if none), trimmed,
// and the header it came from (as session_headers spells it; "" with no value).
func (rt *routing) sessionID(r *http.Request) (session, header string) {
	for i, k := range rt.sessionKeys {
		if v := strings.TrimSpace(headerValue(r.Header, k)); v != "" {
			return v, rt.cfg.SessionHeaders[i]
		}
	}
	return "", ""
}

// namedSession adds the header the session ID came from to an
// affinity.ErrSessionIDTooLong error, so that a client sending several session headers
// knows which one to shorten ("... (header X-Session-ID)"); other errors, and a header
// of "", are returned as they are.
func namedSession(err error, header string) error {
	if header == "" || !errors.Is(err, affinity.ErrSessionIDTooLong) {
		return err
	}
	return fmt.Errorf("%w (header %s)", err, header)
}

// parentSessionID returns the first non-empty parent_session_headers value ("" if none).
func (rt *routing) parentSessionID(r *http.Request) string {
	for _, k := range rt.parentKeys {
		if v := strings.TrimSpace(headerValue(r.Header, k)); v != "" {
			return v
		}
	}
	return ""
}

// conflictingHeader returns an error naming the first of the session, parent session,
// tier and tenant headers (Authorization too with tenant.api_key: its bearer key is the
// tenant) that r carries more than once with values that differ (after trimming
// spaces), nil otherwise. The header is named as configured (X-Session-ID, not its
// canonical form X-Session-Id). The values are not quoted (a tenant header is an
// identity). Decision: the gateway reads the first value of a header; a proxy in front
// that reads the last would route, authenticate or bill the same request as another
// session, tier or tenant, so differing copies are refused (400 conflicting_header)
// rather than resolved silently. Identical copies pass (some proxies repeat a header).
// 0 allocs unless a header is repeated.
func (rt *routing) conflictingHeader(r *http.Request) error {
	for _, h := range rt.checked {
		vs := r.Header[h.key]
		if len(vs) < 2 {
			continue
		}
		for _, v := range vs[1:] {
			if strings.TrimSpace(v) != strings.TrimSpace(vs[0]) {
				return fmt.Errorf("header %s sent %d times with different values: send it once", h.name, len(vs))
			}
		}
	}
	return nil
}

// headerValue is h.Get(key) for a key already in canonical form: the first value, ""
// if none. A map lookup, 0 allocs.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
