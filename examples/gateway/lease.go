package gateway

import (
	"net/http"

	"github.com/agentserve/sessionaffinity/affinity"
)

// Load-awareness wiring: every generation call with a session is placed by
// affinity.Scheduler.Acquire with cost = request body bytes / 4 (a rough prompt-token
// estimate), and its lease is released (Lease.Done) when the response body has been
// copied to the client and closed — the end of a JSON response or SSE stream, a client
// cancel, a backend error — with the usage the backend reported: the "usage" object of a
// JSON response (found in its last 4 KiB when the body streams through unread), or of the
// last SSE chunk that carries one (vLLM sends it when the client asks for
// stream_options.include_usage, or the gateway in its place: stream_usage,
// streamusage.go), read in the shape of the endpoint (usage_api.go:
// chat/completions and completions, the Responses API, the Anthropic Messages API). Its
// cached count is passed as reported (affinity.DoneInfo.CacheReported) only when it is
// there (usage.prompt_tokens_details.cached_tokens on chat/completions): vLLM sends it
// only with --enable-prompt-tokens-details, and an absent or null
// count is unknown to the Scheduler, not a lost cache. A retry on another backend
// releases the failed attempt's lease (with the attempt's error) and leases the backend
// it goes to, so the load and the usage are booked where the request is served
// (retryTarget, passive.go).
// Requests without a session ID, and other requests with one (unbind), are hashed
// without a binding (route.choose) and leased
// by affinity.Scheduler.LeaseBackend on the backend they are hashed to: their load
// counts in the backends' outstanding load (placement, metrics) like any other, and
// nothing is bound or counted as a hit or miss. Their leases end on the same paths.

// HeaderOutcome carries the placement outcome of a generation call with a session:
// "hit", "miss", "rebind" or "spill" (affinity.Outcome) — of the attempt that served the
// response; absent for requests without a session and for other requests with one
// (unbind).
const HeaderOutcome = "X-Agent-Serve-Outcome"

// setOutcome sets HeaderOutcome from st's current lease; nothing for a request without a
// session (its LeaseBackend lease is load only: no placement outcome to report).
func (st *route) setOutcome(h http.Header) {
	if st.session == "" {
		return
	}
	st.mu.Lock()
	var o affinity.Outcome
	if st.lease != nil {
		o = st.lease.Outcome
	}
	st.mu.Unlock()
	if o != 0 {
		h[HeaderOutcome] = st.headerSlot(slotOutcome, o.String()) // canonical already
	}
}

// Metric names of the gateway's per-backend outstanding load (label backend: the
// configured backend IDs, plus those of backends a reload removed while requests leased
// on them are still in flight, until they end): the leases not yet Done of the current
// Scheduler and of those a reload replaced while requests were in flight on them
// (outstanding.go).
const (
	MetricOutstandingRequests = "agentserve_gateway_backend_outstanding_requests"
	MetricOutstandingCost     = "agentserve_gateway_backend_outstanding_cost_tokens"
)

// leaseCost is the Acquire cost of a request body: bytes / 4, about one token per four
// bytes of English/JSON text.
func leaseCost(body []byte) int64 { return int64(len(body) / 4) }

// acquire places st (its first attempt, or a retry after the failure ejected the backend:
// the session is placed again) through the lease of its routing snapshot's scheduler. A
// lease belongs to the scheduler that made it: after a reload its Done still releases
// there.
func (st *route) acquire(cands []affinity.Backend) (*backend, bool, error) {
	b, hit, err := st.lease1(func(l *affinity.Lease) error {
		_, err := st.rt.sched.AcquireWithParent(st.session, st.parent, st.tier, cands, st.cost, l)
		return err
	})
	if err == nil {
		st.mu.Lock()
		st.placed = true
		out := st.lease.Outcome
		st.mu.Unlock()
		if out != affinity.OutcomeHit { // miss, rebind or spill: Acquire stored a binding
			// A reload may have copied the table before it (schedLife.forward).
			st.rt.life.forward(st.session, st.tier, b.id, out != affinity.OutcomeMiss)
		}
	}
	return b, hit, err
}

// forgetNewBinding removes the binding st's placement created on b — a generation call
// whose current lease came from Acquire with Outcome miss, rebind or spill — when the backend
// answered status 404 or 405: the path does not exist there, nothing was generated, and
// keeping the binding would let a loop of POST /nope/completions with fresh session IDs
// evict every other session's binding (max_bindings is shared by all clients). Only a
// binding that still names b is removed (Scheduler.ForgetIf, a compare-and-forget: a
// concurrent request of the same session that rebound it elsewhere keeps its binding).
// A reload that built a new Scheduler while the request ran has copied the binding
// there: it is removed from the current Scheduler too (a reload switching Schedulers
// between the two calls, while its copy runs, can still keep it). Counts nothing.
func (st *route) forgetNewBinding(g *Gateway, b *backend, status int) {
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed || st.session == "" {
		return
	}
	st.mu.Lock()
	created := st.placed && st.lease != nil &&
		st.lease.Outcome != affinity.OutcomeHit // miss, rebind or spill: Acquire stored it
	st.mu.Unlock()
	if !created {
		return
	}
	st.rt.sched.ForgetIf(st.session, st.tier, b.id)
	if cur := g.rt.Load().sched; cur != st.rt.sched {
		cur.ForgetIf(st.session, st.tier, b.id)
	}
}

// leaseBackend leases b for a request the gateway routes itself — a request without a
// session (hashed onto b), or a retry that keeps the session's binding — with
// LeaseBackend, which charges b and decides, stores, moves and breaks nothing
// (AffinityHit false, Outcome miss, no hit or miss counted).
func (st *route) leaseBackend(b *backend) (*backend, bool, error) {
	st.mu.Lock()
	st.placed = false // this attempt's lease stores nothing
	st.mu.Unlock()
	return st.lease1(func(l *affinity.Lease) error { return st.rt.sched.LeaseBackend(b.ab, st.cost, l) })
}

// lease1 fills one attempt's Lease with lease. The previous attempt's lease must have been
// released (endAttempt). Each attempt has its own Lease (the first one's lives in the
// route: no allocation), so a late Done on a failed attempt's Lease (its body closed on
// another goroutine) never races with the next attempt filling its own.
func (st *route) lease1(lease func(*affinity.Lease) error) (*backend, bool, error) {
	rt := st.rt
	st.mu.Lock()
	l := &st.lease0
	if st.used0 { // a retry
		l = new(affinity.Lease)
	}
	st.used0 = true
	st.mu.Unlock()

	if err := lease(l); err != nil {
		return nil, false, err
	}
	st.mu.Lock()
	st.lease = l
	st.mu.Unlock()
	return rt.byID[l.Backend.ID()], l.AffinityHit, nil
}

// endAttempt releases the lease of a failed attempt with its error (nil lease: no-op);
// the next attempt takes its own.
func (st *route) endAttempt(err error) {
	st.mu.Lock()
	l := st.lease
	st.lease = nil
	st.mu.Unlock()
	l.Done(affinity.DoneInfo{Err: err})
}

// release ends st's lease (idempotent) with the usage seen so far and err.
func (st *route) release(u usage, err error) {
	st.mu.Lock()
	l := st.lease
	st.mu.Unlock()
	l.Done(affinity.DoneInfo{PromptTokens: u.PromptTokens, CachedPromptTokens: u.CachedTokens,
		CacheReported: u.CachedReported, CompletionTokens: u.CompletionTokens, Err: err})
}
