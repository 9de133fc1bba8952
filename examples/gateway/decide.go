package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentserve/sessionaffinity/affinity"
)

// Decision is the routing decision [Gateway.Decide] makes for one request, for
// integrations that forward requests themselves (such as an Envoy ext_proc endpoint
// picker).
type Decision struct {
	BackendID   string   // the chosen backend's id
	URL         *url.URL // its base URL (shared: do not modify)
	AffinityHit bool     // true when the session's binding was reused
	// Bound is true when the decision went through the session's binding (a generation
	// call with a session), so the Scheduler counted it as a hit or a miss; false for a
	// request without a session, or one hashed by its session without a binding.
	Bound bool
	Tier  string // the request's tier ("" is the default tier)
	// Body is the request body to forward: the input, or a copy with vLLM's cache_salt
	// set when tenant.cache_salt applies.
	Body []byte
	// Done ends the decision's lease (affinity.Scheduler.AcquireWithParent; for a
	// request without a session, affinity.Scheduler.LeaseBackend on the backend it was
	// hashed to): call it once the response has ended or failed, so the backend's
	// outstanding load drops. Idempotent and safe from any goroutine; never nil on
	// success.
	Done func()
}

// RequestError is a request [Gateway.Decide] rejects, with the HTTP status and the
// OpenAI-style error code the gateway itself would answer with. It wraps the cause
// (for example affinity.ErrNoEligibleBackend), so errors.Is works.
type RequestError struct {
	Status int    // e.g. 400, 503
	Code   string // e.g. "invalid_json", "no_backend_available"
	Err    error
}

// Error returns the cause's message.
func (e *RequestError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *RequestError) Unwrap() error { return e.Err }

// ClientMessage returns the message for the client's JSON error: the cause's text
// without the Go packages' prefixes (ErrRequest's "gateway: bad request: ", the library's
// "affinity: "), which name this program's code rather than the request's problem, as
// the HTTP gateway writes it; "routing error" alone for a routing_error (an unexpected
// failure: log the cause, do not show it). O(len(message)).
func (e *RequestError) ClientMessage() string {
	if e.Code == "routing_error" {
		return "routing error"
	}
	return clientText(e.Err)
}

// ErrRequest is wrapped by the causes of [RequestError]s that have no library sentinel
// (malformed body, unknown tier, missing session ID, conflicting duplicate headers).
var ErrRequest = errors.New("gateway: bad request")

// Decide routes r (whose body, already read, is body) exactly as [Gateway.ServeHTTP]
// would — session and parent headers, tier, tenant scope and cache_salt, the
// Scheduler's decision — without proxying it. r.Body is not read. allow, when not nil,
// restricts the candidates to the backends for which allow(id) is true (an empty
// subset is a 503, affinity.ErrNoCandidates). With tenant.cache_salt the salted body
// (Decision.Body) is a new slice one copy of body long, not charged to
// limits.max_inflight_bytes: Decide holds no budget, the caller holds the body.
//
// Errors are *[RequestError]: 400 invalid_path for a path [CheckPath] refuses (checked
// first: r.RequestURI's path when set, as ServeHTTP checks it, else r.URL's escaped
// path, so r.URL must not be nil; the method is not checked, unlike ServeHTTP's CONNECT
// and TRACE), 415 unsupported_content_encoding for a JSON body sent with
// a Content-Encoding other than identity, 400 for a malformed JSON body, differing copies of a session, parent, tier
// or tenant header (conflicting_header), an unknown tier, a session
// ID too long, or missing on a generation call with require_session; 503 when no
// backend is eligible. Only a generation call with a session (a POST to
// .../chat/completions, /completions, /responses or /messages) binds it, and the
// Scheduler counts that decision (hit or miss) as for a proxied request; any other
// request with a session is hashed by it without a binding, counted neither as hit nor
// miss (as ServeHTTP does). Safe for concurrent use. The decision holds a lease on the backend until Decision.Done, with
// or without a session.
func (g *Gateway) Decide(r *http.Request, body []byte, allow func(id string) bool) (Decision, error) {
	if err := checkRequestPath(r); err != nil {
		return Decision{}, &RequestError{http.StatusBadRequest, "invalid_path", err}
	}
	rt := g.pin() // until the lease is taken (outstanding.go)
	defer rt.unpin()
	model, _, err := parseModel(r, body)
	if err != nil {
		status, code := bodyStatus(err)
		return Decision{}, &RequestError{status, code, fmt.Errorf("%w: %w", ErrRequest, err)}
	}
	if err := rt.conflictingHeader(r); err != nil {
		return Decision{}, &RequestError{http.StatusBadRequest, "conflicting_header", fmt.Errorf("%w: %w", ErrRequest, err)}
	}
	session, sessionHeader := rt.sessionID(r)
	parent := rt.parentSessionID(r)
	tier, err := rt.tier(r, model)
	if err != nil {
		return Decision{}, &RequestError{http.StatusBadRequest, "unknown_tier", fmt.Errorf("%w: %w", ErrRequest, err)}
	}
	if tenant := rt.tenantOf(r); tenant != "" {
		if session, parent, err = rt.scopeSession(tenant, session, parent); err != nil {
			return Decision{}, &RequestError{http.StatusBadRequest, "session_id_too_long", namedSession(err, sessionHeader)}
		}
		if body, err = rt.saltBody(r, body, tenant, nil); err != nil {
			return Decision{}, &RequestError{http.StatusBadRequest, "invalid_json", fmt.Errorf("%w: %w", ErrRequest, err)}
		}
	}
	st := &route{rt: rt, session: session, parent: parent, tier: tier, in: r, body: body, allow: allow}
	switch {
	case session == "":
		if rt.cfg.RequireSession && generationCall(r) {
			return Decision{}, &RequestError{http.StatusBadRequest, "missing_session_id",
				fmt.Errorf("%w: missing session ID: send one of the headers %s", ErrRequest, strings.Join(rt.cfg.SessionHeaders, ", "))}
		}
		if st.key = r.Header.Get(HeaderRequestID); st.key == "" {
			st.key = randomKey()
		}
	case !generationCall(r): // hashed by its session, no binding (session.go)
		if err := st.unbind(); err != nil {
			return Decision{}, &RequestError{http.StatusBadRequest, "session_id_too_long", namedSession(err, sessionHeader)}
		}
	}
	b, hit, err := st.choose()
	if err != nil {
		err = namedSession(err, sessionHeader)
		status, code := classify(err)
		return Decision{}, &RequestError{status, code, err}
	}
	return Decision{BackendID: b.id, URL: b.url, AffinityHit: hit, Bound: session != "" && generationCall(r), Tier: tier,
		Body: body, Done: func() { st.release(usage{}, nil) }}, nil
}

// subset returns the tier's candidates for which allow is true.
func (rt *routing) subset(tier string, allow func(string) bool) ([]affinity.Backend, []*backend) {
	var cands []affinity.Backend
	var nodes []*backend
	for i, b := range rt.tierNodes[tier] {
		if allow(b.id) {
			cands = append(cands, rt.byTier[tier][i])
			nodes = append(nodes, b)
		}
	}
	return cands, nodes
}
