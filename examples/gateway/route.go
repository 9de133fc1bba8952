package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// ServeHTTP serves /metrics, /healthz and /readyz itself and proxies everything else,
// except CONNECT and TRACE (a JSON 405, method.go) and a request whose path as sent —
// r.RequestURI's, not r.URL's — [CheckPath] refuses (a JSON 400). (With admin_listen
// set, [Gateway.Serve] also serves those three on their own listener: admin.go.)
func (g *Gateway) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	// A declared body is read (readBody) or, after an earlier answer, discarded by the
	// server (up to 256 KiB, before it sends the answer) within read_body_seconds from
	// here: nothing else bounds that read (tester44).
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		_ = http.NewResponseController(rw).SetReadDeadline(time.Now().Add(duration(g.state().cfg.Timeouts.ReadBodySeconds)))
	}
	if g.serveOps(rw, r) {
		return
	}
	rt := g.pin()               // unpinned when the request ends: it leases only on rt.sched (outstanding.go)
	st := &route{rt: rt, in: r} // one allocation for the request's own state
	w := &st.ow
	w.ResponseWriter, w.http10 = rw, !r.ProtoAtLeast(1, 1)
	w.wbound.start(rw, duration(rt.cfg.Timeouts.ClientWriteSeconds))
	defer func() {
		// Still copying: the ReverseProxy aborted the response (http.ErrAbortHandler); if
		// the client's context has ended, the client went away mid-response. Not a backend
		// failure (idleBody): Debug only, and counted as client_closed.
		if w.copying && r.Context().Err() != nil {
			w.gone = true
		}
		// The backend cut or stalled the body while the client was still there (idleBody,
		// attemptTimer): a backend failure, logged at Warn where it was seen; the client's
		// context may have ended since, as the aborted response closes its connection.
		w.cut = st.cut.Load()
		if !w.cut {
			g.logCut(st, r) // drain.go
		}
		g.countOutcome(w)
		// The route may outlive the request (an idle backend connection of the net/http
		// client keeps its last request's context); the client's writer must not.
		w.ResponseWriter = nil
		rt.unpin() // no lease is taken after this (pin)
		// Nothing answered and the client's context ended (the client left, or half-closed
		// its connection, which both servers take for leaving): abort rather than return,
		// or the server would send an empty 200 OK for a request nobody served
		// (tester39). Counted as client_closed above.
		if w.code == 0 && r.Context().Err() != nil {
			panic(http.ErrAbortHandler)
		}
	}()
	defer func() {
		st.releaseBody()
		g.unreserve(st, st.reserved.Load())
	}()

	// Before the body is read or anything routed (method.go, path.go).
	if refusedMethod(r.Method) {
		refuseMethod(w, r.Method)
		return
	}
	if err := checkRequestPath(r); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_path", clientText(err))
		return
	}
	body, ok := g.readBody(w, r, st)
	if !ok {
		return
	}
	// Counted once its body is in (a request without one: at once), not while it
	// uploads: slow uploads are bounded by max_connections, read_body_seconds and
	// max_inflight_bytes, and must not hold the slots of requests ready to be routed.
	if !take(&g.limits.reqs, 1, rt.cfg.Limits.MaxInflightRequests) {
		g.overloaded(w, rt, "requests in flight exceed limits.max_inflight_requests")
		return
	}
	defer g.limits.reqs.Add(-1)

	model, top, err := parseModel(r, body)
	if err != nil {
		status, code := bodyStatus(err)
		if status == http.StatusUnsupportedMediaType {
			w.Header().Set("Accept-Encoding", "identity") // RFC 9110 §15.5.16
		}
		writeError(w, status, code, err.Error())
		return
	}
	if err := rt.conflictingHeader(r); err != nil {
		writeError(w, http.StatusBadRequest, "conflicting_header", err.Error())
		return
	}
	session, sessionHeader := rt.sessionID(r)
	parent := rt.parentSessionID(r)
	tier, err := rt.tier(r, model)
	if err != nil {
		writeError(w, http.StatusBadRequest, "unknown_tier", err.Error())
		return
	}
	if rt.cfg.StreamUsage { // streamusage.go
		// The copy is charged like the body (released with the request).
		if body, st.askedUsage, err = rt.streamUsageBody(r, body, top, func(n int64) bool { return g.reserve(st, n) }); err != nil {
			g.overloaded(w, rt, "request bytes in flight exceed limits.max_inflight_bytes")
			return
		}
	}
	if tenant := rt.tenantOf(r); tenant != "" {
		// Scope the binding by tenant: another tenant sending the same session (or
		// parent) ID gets its own binding. Only the keyed hash reaches the Scheduler.
		if session, parent, err = rt.scopeSession(tenant, session, parent); err != nil {
			writeError(w, http.StatusBadRequest, "session_id_too_long", clientText(namedSession(err, sessionHeader)))
			return
		}
		// The salted copy is charged like the body (released with the request).
		if body, err = rt.saltBody(r, body, tenant, func(n int64) bool { return g.reserve(st, n) }); err != nil {
			if errors.Is(err, errOverBudget) {
				g.overloaded(w, rt, "request bytes in flight exceed limits.max_inflight_bytes")
				return
			}
			writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
			return
		}
	}
	st.session, st.parent, st.tier, st.body, st.cost = session, parent, tier, body, leaseCost(body)
	switch {
	case session == "":
		if rt.cfg.RequireSession && generationCall(r) {
			writeError(w, http.StatusBadRequest, "missing_session_id",
				"missing session ID: send one of the headers "+strings.Join(rt.cfg.SessionHeaders, ", "))
			return
		}
		st.key = r.Header.Get(HeaderRequestID)
		if st.key == "" {
			st.key = randomKey()
		}
	case !generationCall(r): // hashed by its session, no binding (session.go)
		if err := st.unbind(); err != nil {
			g.routingError(w, rt, namedSession(err, sessionHeader))
			return
		}
	}
	b, hit, err := st.choose()
	if err != nil {
		g.routingError(w, rt, namedSession(err, sessionHeader))
		return
	}
	st.backend, st.hit = b, hit

	st.ctx = routeCtx{Context: r.Context(), st: st}
	st.out = *r.WithContext(&st.ctx) // inlined: the copy WithContext makes stays on the stack
	out := &st.out
	out.TransferEncoding = nil
	out.ContentLength = int64(len(body))
	if len(body) == 0 {
		out.Body, out.GetBody = http.NoBody, nil
	} else {
		out.Body = bodyInRewrite{} // rewrite gives the outgoing request its own reader
		if !g.directHop(b, r) {
			// For net/http.Transport, which rewinds the body with it for a retry of its own;
			// the direct client never does, and a retry of the gateway's reads st itself.
			out.GetBody = st.getBody // a method value: an allocation
		}
	}
	w.copying = true
	g.proxy.ServeHTTP(w, out) // panics with http.ErrAbortHandler when a response is cut
	w.copying = false
	if st.trailers { // the client's trailers are written after this returns
		stripSentOwnTrailers(w.Header()) // ownheaders.go
	}
	st.release(usage{}, out.Context().Err()) // no-op if the response body released it (lease.go)
}

// directHop reports whether the direct client itself sends a request r to b, without
// handing it to its net/http.Transport fallback (an https backend, an Upgrade header:
// directTransport.roundTrip's test, taken before httputil.ReverseProxy drops an Upgrade
// the Connection field does not name).
func (g *Gateway) directHop(b *backend, r *http.Request) bool {
	_, ok := g.base.(*directTransport)
	return ok && b.url.Scheme == "http" && len(r.Header["Upgrade"]) == 0
}

// getBody replays the request body for a retry (http.Request.GetBody). It reads st.body,
// not a captured slice, so that releaseBody can drop the last reference.
func (st *route) getBody() (io.ReadCloser, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return io.NopCloser(bytes.NewReader(st.body)), nil
}

// bodyInRewrite stands for a non-empty request body between ServeHTTP and rewrite, which
// replaces it with the outgoing request's own reader (httputil.ReverseProxy clones the
// request in between, so a reader made earlier would be a wasted allocation). Reading it
// is an error: a path that skipped rewrite must not send an empty body.
type bodyInRewrite struct{}

var errBodyInRewrite = errors.New("gateway: request body read before rewrite")

func (bodyInRewrite) Read([]byte) (int, error) { return 0, errBodyInRewrite }
func (bodyInRewrite) Close() error             { return nil }

// releaseBody drops the route's references to the request body once the request is
// done. Requests stay referenced after that (by the context of an idle backend
// connection's last request, for one), and their body must not: it is no longer counted
// in limits.max_inflight_bytes.
func (st *route) releaseBody() {
	st.mu.Lock()
	st.body = nil
	st.mu.Unlock()
}

// route is the per-request routing state shared by Rewrite, the retry transport,
// ModifyResponse and ErrorHandler through the request context.
type route struct {
	rt      *routing // the routing snapshot this request uses throughout
	session string
	parent  string // parent session ID (placement hint of a first turn), "" if none
	tier    string
	key     string // HRW key of a request placed without a binding: its session ID (unbind), else X-Request-Id or a random key
	in      *http.Request
	allow   func(id string) bool // nil: every backend of the tier is a candidate (see Decide)
	body    []byte               // the request body, read in full
	// askedUsage: stream_usage added stream_options.include_usage to body, so the
	// usage-only event is taken out of the response stream (streamusage.go).
	askedUsage bool
	// trailers: the response may end with trailers the backend did not declare
	// (modifyResponse), whose X-Agent-Serve-* ones ServeHTTP removes after the copy.
	trailers bool

	mu      sync.Mutex
	backend *backend
	hit     bool
	retried bool

	reserved atomic.Int64    // bytes charged to the in-flight budget (limits.go)
	cut      atomic.Bool     // the backend cut or stalled the response body (idleBody, attemptTimer): code_class backend_closed
	lease    *affinity.Lease // of the current attempt (lease.go); nil before the first
	cost     int64           // Acquire cost: body bytes / 4
	lease0   affinity.Lease  // the first attempt's Lease (retries allocate their own)
	used0    bool            // lease0 has been handed to an attempt
	placed   bool            // the current lease came from Acquire, not LeaseBackend (forgetNewBinding)

	// Per-request objects kept here to save an allocation each: the request context
	// that carries the route, the copy of the client's request that carries it to the
	// ReverseProxy, the response writer wrapper, the bodies modifyResponse installs (at
	// most one of each per request) and the values of the headers rewrite and
	// modifyResponse set (slices of length and capacity 1 into hdr: an append by anyone
	// copies; indexes: the slot constants).
	ctx    routeCtx
	out    http.Request
	ow     outcomeWriter
	upload drainUpload // its body's read, for the drain's end (drain.go)
	pb     pooledBody
	lb     leaseBody
	hdr    [slots]string
}

// Indexes of route.hdr.
const (
	slotBackend = iota
	slotHit
	slotOutcome
	slotContentLength
	slotForwardedFor
	slotForwardedHost
	slotForwardedProto
	slotUserAgent
	slots
)

// headerSlot returns a one-value header slice holding v, backed by st.hdr[i].
func (st *route) headerSlot(i int, v string) []string {
	st.hdr[i] = v
	return st.hdr[i : i+1 : i+1]
}

// replaceField sets h[k] = vv for a key k that h may already hold, deleting it first: a
// Go map of up to 8 entries is kept in one group of 8 slots, and once all 8 are used
// any assignment grows it into a table (3 allocations and a rehash of every entry), even
// one to a key it holds. A backend's 5 response fields plus the gateway's 3 fill it (the
// peer benchmark's simulators send 5, so its every response paid that before the
// Content-Length of the rewritten body was set). k must be canonical.
func replaceField(h http.Header, k string, vv []string) {
	delete(h, k)
	h[k] = vv
}

func (st *route) current() (*backend, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.backend, st.hit
}

type routeKey struct{}

// routeCtx is the context of a proxied request: its parent's, plus the route as the value
// of routeKey — context.WithValue's, without the allocation (it lives in the route).
type routeCtx struct {
	context.Context
	st *route
}

// Value returns the route for routeKey, the parent's value otherwise.
func (c *routeCtx) Value(key any) any {
	if _, ok := key.(routeKey); ok {
		return c.st
	}
	return c.Context.Value(key)
}

func routeFrom(ctx context.Context) *route {
	st, _ := ctx.Value(routeKey{}).(*route)
	return st
}

// choose picks the backend from the request's routing snapshot and leases the request
// on it: the scheduler's Acquire for a generation call with a session, a one-off HRW
// pick over the request key (nothing stored; see unbind) leased by LeaseBackend
// otherwise.
func (st *route) choose() (*backend, bool, error) {
	rt := st.rt
	cands, nodes := rt.byTier[st.tier], rt.tierNodes[st.tier]
	if st.allow != nil {
		if cands, nodes = rt.subset(st.tier, st.allow); len(cands) == 0 {
			return nil, false, fmt.Errorf("%w: tier %q: no backend in the allowed subset", affinity.ErrNoCandidates, st.tier)
		}
	}
	if st.session != "" {
		return st.acquire(cands)
	}
	hs := rt.sched.Health()
	var best hrw.Best
	for _, want := range []health.State{health.Healthy, health.Draining} {
		best.Reset(hrw.KeyHash(st.key))
		for i, b := range nodes {
			if hs.State(b.id) == want {
				best.Offer(i, &b.node)
			}
		}
		if i := best.Index(); i >= 0 {
			return st.leaseBackend(nodes[i])
		}
	}
	// The Scheduler's words for a generation call in the same state, so that a GET
	// /v1/models and a POST say the same.
	return nil, false, fmt.Errorf("%w: all %d candidates are down", affinity.ErrNoEligibleBackend, len(nodes))
}

func (rt *routing) tier(r *http.Request, model string) (string, error) {
	if v := headerValue(r.Header, rt.tierKey); v != "" {
		v = strings.TrimSpace(v)
		if !rt.knownTiers[v] {
			if v == metrics.DefaultTierLabel {
				// "default", the metric label of the empty tier, names the default tier
				// unless the config has a tier of that name (checked above, it wins).
				return "", nil
			}
			if h := http.CanonicalHeaderKey(rt.cfg.TierHeader); h == "Authorization" ||
				rt.cfg.Tenant.Header != "" && h == http.CanonicalHeaderKey(rt.cfg.Tenant.Header) {
				// A credential or a tenant identity: never echoed in an error body.
				return "", fmt.Errorf("unknown tier in header %s (value not shown)", rt.cfg.TierHeader)
			}
			return "", fmt.Errorf("unknown tier %q in header %s", truncate(v, 64), rt.cfg.TierHeader)
		}
		return v, nil
	}
	return rt.cfg.ModelTiers[model], nil
}

// serveOps answers /metrics, /healthz and /readyz and reports true, or reports false
// for any other path (nothing written). The same answers on the main and the admin
// listener. The three are read-only: a method other than GET and HEAD gets a JSON 405
// with Allow: GET, HEAD (opsMethods, method.go).
func (g *Gateway) serveOps(rw http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case "/metrics", "/healthz", "/readyz":
	default:
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		refuseOpsMethod(rw, r.Method, r.URL.Path)
		return true
	}
	var b writeBound // a client that does not read them gives up its connection too
	b.start(rw, duration(g.state().cfg.Timeouts.ClientWriteSeconds))
	switch r.URL.Path {
	case "/metrics":
		g.metrics.ServeHTTP(rw, r)
	case "/healthz":
		writeJSON(rw, http.StatusOK, map[string]string{"status": "ok"})
	default:
		g.serveReady(rw)
	}
	return true
}
