package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
)

// retryTransport implements the passive half of health checking. Every attempt runs
// under the response-header timeout and its body under the stream-idle timeout
// (timeouts.go); its outcome feeds outlier detection (outlier.go), at most once: a
// response below 500 is a success when its body has been read to its end (a bodiless
// one — HEAD, 204, 304, Content-Length 0 — when it is closed), a 5xx a 5xx failure, a
// connection failure on a fresh connection, a timeout, a stalled body or one the backend
// cuts a connection failure; a body the client drops before its end records nothing. A
// connection closed by the backend on a reused
// keep-alive connection before any response byte is the keep-alive race, not an outage:
// it is not counted. A failed request is retried (retry_on_connect_error) when it is
// safe: it was never written to the backend (dial error, write failed), or it is
// replayable (idempotent method, or an Idempotency-Key header) — the rule of
// net/http.Transport. It moves to another backend once, and on to a third
// (maxRetryBackends) only after a connect failure that sent nothing. Nothing has been
// written to the client at that point: RoundTrip has not returned a response yet.
type retryTransport struct{ g *Gateway }

// maxRetryBackends bounds the backends one request is tried on. Decision (small2;
// tester38 finding 4: at start-up with 600 dead backends not yet marked Down, a retry
// after a refused connection went to a second dead backend and the client got a 502): a
// request moves to another backend once after any retried failure, as before, and once
// more — to a third backend, none tried before for this request — only when the second
// backend's failure was a connect error with nothing sent (a dial refused or timed out,
// a connection closed before the request was written), which is always safe to retry.
// Three, not more: each dead backend costs a dial (up to timeouts.dial_seconds when it
// times out), and more than two dead backends in a row for one session means an outage
// that health checks and outlier detection are there to see.
const maxRetryBackends = 3

// RoundTrip sends req to its backend and retries it when that is safe (see
// retryTransport): after a stale keep-alive connection once on the same backend (a fresh
// connection), after a counted failure (or a second stale connection) once on another,
// and after a connect failure that sent nothing on a third (maxRetryBackends).
func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	g := t.g
	st := routeFrom(req.Context())
	if st == nil {
		return g.base.RoundTrip(req)
	}
	target, _ := st.current()
	var triedBuf [maxRetryBackends]string
	tried := append(triedBuf[:0], target.id) // the backends tried, for the next choice to skip
	sameAgain := false
	for {
		resp, a, err := g.attempt(req, st, target)
		if err == nil || req.Context().Err() != nil {
			return resp, err
		}
		counted := g.passiveFailure(target, a, err)
		stale := a.staleConn(err)
		// A move after the first only after a connect failure that sent nothing.
		mayMove := len(tried) == 1 || len(tried) < maxRetryBackends && a.neverWritten() && IsConnectError(err) && !stale
		if !st.rt.cfg.retryOnConnectError() || !(a.neverWritten() || replayable(req)) || !(counted || stale) || !mayMove {
			return nil, err
		}
		failed := target
		if stale && !sameAgain {
			sameAgain = true // the backend closed an idle connection: try it again on a fresh one
		} else {
			next, hit, serr := g.retryTarget(st, target, tried, err)
			if serr != nil || next.id == target.id {
				g.log.Warn("no backend to retry on", "failed", target.id, "err", serr)
				return nil, err
			}
			st.mu.Lock()
			st.backend, st.hit, st.retried = next, hit, true
			st.mu.Unlock()
			target = next
			tried = append(tried, next.id)
		}
		// backend is the failed one, as in every other line (err is its attempt's error);
		// to is where the request goes now (the same backend after a stale connection).
		g.log.Info("retrying request", "backend", failed.id, "failed", failed.id, "to", target.id, "stale_conn", stale, "err", err)
		out := req.Clone(req.Context())
		out.URL = cloneURL(st.in)
		(&httputil.ProxyRequest{In: st.in, Out: out}).SetURL(target.url)
		if req.ContentLength > 0 { // the route's body, read in full (GetBody may not be set: ServeHTTP)
			out.Body, _ = st.getBody()
			out.GetBody = st.getBody
		}
		req = out
	}
}

// retryTarget picks the backend a failed request is retried on, never one of tried (the
// backends this request was tried on, failed the last of them). If the failure ejected
// the backend, the session is placed again (Acquire: its binding was broken and it
// rebinds, a miss; on a third backend, the candidates leave out those tried, so a
// binding to an earlier one that failed without being ejected is moved too). Otherwise
// the binding stays and only this request goes to the session's next choice among the
// other eligible backends (nextChoice; hit false, nothing stored): one failure is not an
// outage. Either way the request then holds its lease on the backend returned (a
// request without a session too: LeaseBackend), and the failed attempt's lease has been
// released with cause, the attempt's error (lease.go); when no backend is found the
// failed attempt keeps its lease (released when the request ends).
func (g *Gateway) retryTarget(st *route, failed *backend, tried []string, cause error) (*backend, bool, error) {
	if g.outliers.isEjected(failed.id) {
		st.endAttempt(cause)
		if len(tried) > 1 { // failed is Down; an earlier one may not be
			allow, skip := st.allow, slices.Clone(tried) // a copy: RoundTrip's stays on its stack
			st.allow = func(id string) bool { return !slices.Contains(skip, id) && (allow == nil || allow(id)) }
			defer func() { st.allow = allow }()
		}
		return st.choose()
	}
	next, err := st.nextChoice(tried)
	if err != nil {
		return nil, false, err
	}
	st.endAttempt(cause)
	return st.leaseBackend(next)
}

// nextChoice is the backend a retry that keeps the binding goes to, among the eligible
// backends of the request's tier other than those tried: the Healthy ones, else the
// Draining ones. Plain HRW order by the session ID (by the request's key without a
// session) picks the first of them, except that with the scheduler's load block on
// (affinity.load.balance_factor > 0) a request with a session takes the first backend
// of its HRW ranking that is under the balance bound (underBound), and the plain HRW
// choice only when none is.
func (st *route) nextChoice(tried []string) (*backend, error) {
	key := st.key
	loadAware := false
	if st.session != "" {
		key = st.session
		loadAware = st.rt.cfg.Affinity.Load.BalanceFactor > 0
	}
	nodes := st.rt.tierNodes[st.tier]
	hs := st.rt.sched.Health()
	var best hrw.Best
	for _, want := range []health.State{health.Healthy, health.Draining} {
		eligible := func(b *backend) bool { return hs.State(b.id) == want && !slices.Contains(tried, b.id) }
		if loadAware {
			if b := st.underBound(key, nodes, eligible); b != nil {
				return b, nil
			}
		}
		best.Reset(hrw.KeyHash(key))
		for i, b := range nodes {
			if eligible(b) {
				best.Offer(i, &b.node)
			}
		}
		if i := best.Index(); i >= 0 {
			return nodes[i], nil
		}
	}
	return nil, fmt.Errorf("%w: tier %q", affinity.ErrNoEligibleBackend, st.tier)
}

// underBound is the first backend of key's HRW ranking among the eligible nodes whose load
// is under the balance bound, nil when none is (or none is eligible). It applies the
// Scheduler's bounded-load rule (affinity package documentation, "Load awareness", rule
// 15) to the load view the Scheduler's own placements use (affinity.Scheduler.LoadView,
// read once per backend): with n eligible backends of total load L and this request's
// charge c (its cost, 0 counted as 1, at most affinity.MaxLeaseCost, as LeaseBackend
// charges it), a backend is under the bound when it is idle (load 0) or when load + c <=
// balance_factor x (L + c) / n, or, when the eligible backends' weights differ, <=
// balance_factor x (L + c) x w / W (w its weight, W the eligible weights' sum: its
// weighted share). Deterministic for a given load view. Cost: one LoadView per eligible
// backend and one HRW score per backend under the bound; allocates only for tiers of
// more than 16 backends.
func (st *route) underBound(key string, nodes []*backend, eligible func(*backend) bool) *backend {
	var buf [16]int64
	loads := buf[:0]
	if len(nodes) > len(buf) {
		loads = make([]int64, 0, len(nodes))
	}
	var n int
	var total int64
	var wsum, w0 float64 // the eligible weights' sum; the last one seen
	differ := false
	for _, b := range nodes {
		l := int64(-1) // not eligible
		if eligible(b) {
			l = st.rt.sched.LoadView(b.id)
			n++
			total += l // at most MaxLoadView (2^46) each: no overflow below 2^17 backends
			w := b.node.Weight()
			differ = differ || (n > 1 && w != w0)
			w0 = w
			wsum += w
		}
		loads = append(loads, l)
	}
	if n == 0 {
		return nil
	}
	charge := min(max(st.cost, 1), affinity.MaxLeaseCost)
	factor := st.rt.cfg.Affinity.Load.BalanceFactor
	bound := func(*backend) float64 { return factor * float64(total+charge) / float64(n) }
	if differ {
		bound = func(b *backend) float64 { return factor * float64(total+charge) * b.node.Weight() / wsum }
	}
	var best hrw.Best
	best.Reset(hrw.KeyHash(key))
	for i, b := range nodes {
		if l := loads[i]; l == 0 || l > 0 && float64(l+charge) <= bound(b) {
			best.Offer(i, &b.node)
		}
	}
	if i := best.Index(); i >= 0 {
		return nodes[i]
	}
	return nil
}

// passiveFailure records a failed attempt on b for outlier detection and reports
// whether it counted: timeouts, connection failures on a fresh connection and malformed
// responses ([ErrBadResponse], on any connection: the bytes came from the backend) count; a
// stale keep-alive connection, a response-header timeout during which the backend made
// progress on other requests (progress.go: logged at Info, not retried) and other
// errors do not.
func (g *Gateway) passiveFailure(b *backend, a *attemptInfo, err error) bool {
	if te := (*timeoutError)(nil); errors.As(err, &te) && te.progressed {
		g.log.Info("backend timeout not counted for outlier detection", "backend", b.id, "err", err,
			"why", "the backend sent other responses while this request waited: slow, not wedged")
		return false
	}
	switch {
	case errors.Is(err, ErrBackendTimeout), isTimeout(err), errors.Is(err, ErrBadResponse):
	case IsConnectError(err) && !a.staleConn(err):
	default:
		return false
	}
	g.outliers.failure(b.id, connectFailure, err)
	return true
}

// replayable reports whether req may be sent twice: an idempotent method or an
// Idempotency-Key header (the rule of net/http.Transport).
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

func cloneURL(in *http.Request) *url.URL {
	u := *in.URL
	return &u
}

// IsConnectError reports whether err from a RoundTrip means the backend could not be
// reached or dropped the connection before sending a response: dial errors (dial
// timeouts included), refused or reset connections, broken pipes, EOF before the
// response head, and any other non-timeout *net.OpError. Timeouts waiting for a
// response, context cancellation and deadlines are not connection errors. nil is false.
func IsConnectError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) {
		if op.Op == "dial" {
			return true
		}
		if op.Timeout() {
			return false
		}
		return true
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	// net/http's unexported errServerClosedIdle.
	return strings.Contains(err.Error(), "server closed idle connection")
}

// PassivelyDown returns the IDs of backends currently ejected by outlier detection, in
// configuration order (nil if none). Safe for concurrent use; O(backends), allocates the
// result.
func (g *Gateway) PassivelyDown() []string { return g.outliers.ejected() }

// RecheckPassive ends the ejections whose time is over (base_ejection_seconds x number
// of ejections, capped): each such backend is checked once (GET <url><health.path>) and,
// on a 2xx, brought back to its state before the ejection (Healthy, or Draining if it was
// drained) — unless the active prober currently holds it Down, in which case the ejection
// ends and the prober's recovery decides. A backend whose check fails stays ejected and
// is checked again on the next call. It blocks until the checks are done — one at a time,
// each bounded by health.timeout_seconds (default 2 s) — and returns the IDs brought back
// (nil if none). [Gateway.Run] calls it every health.passive_recheck_seconds. Safe for
// concurrent use.
func (g *Gateway) RecheckPassive(ctx context.Context) []string {
	var up []string
	for _, id := range g.outliers.expired() {
		rt := g.state()
		b := rt.byID[id]
		if b == nil || !rt.checkHealth(ctx, g.checker, b) {
			continue
		}
		if g.outliers.uneject(id, "ejection time over and "+rt.cfg.Health.Path+" answered 2xx") {
			up = append(up, id)
		}
	}
	return up
}

// onProbe applies an active-prober transition to the scheduler and logs it. A backend
// the prober finds healthy while it is ejected stays ejected: a backend can pass its
// health check and still fail every request (outlier detection's job).
func (g *Gateway) onProbe(tr health.Transition) {
	if tr.To == health.Healthy && g.outliers.isEjected(tr.ID) {
		g.log.Info("active health check passes; backend stays ejected until its ejection ends", "backend", tr.ID)
		return
	}
	rt := g.state()
	from := rt.sched.Health().State(tr.ID)
	rt.sched.OnHealthChange(tr)
	to := rt.sched.Health().State(tr.ID)
	if from != to {
		why := "active health check: GET " + rt.cfg.Health.Path + " now " + tr.To.String()
		if tr.To == health.Down {
			why = g.probeDownWhy(tr.ID, rt.cfg.Health.Path)
		}
		g.logStateChange(tr.ID, from, to, why)
	}
}

// ProbeOnce runs one synchronous round of the active prober over every backend and
// applies the resulting transitions to the scheduler before it returns. It is a no-op
// when health.enabled is false. [Gateway.Run] does this every interval on its own.
func (g *Gateway) ProbeOnce(ctx context.Context) {
	if p := g.state().prober; p != nil {
		p.ProbeOnce(ctx)
	}
}

// ProbeDue runs one step of the active prober's schedule at the time now
// (health.Prober.ProbeDue): it probes the backends due by then — each backend is probed
// once per interval at its own offset within it, a new one at once (a batch of more
// than 16 new ones spread over up to one interval) — and applies the
// resulting transitions before it returns. For tests with a fake clock: [Gateway.Run]
// follows the same schedule on the system clock. A no-op when health.enabled is false.
func (g *Gateway) ProbeDue(ctx context.Context, now time.Time) {
	if p := g.state().prober; p != nil {
		p.ProbeDue(ctx, now)
	}
}

func (rt *routing) checkHealth(ctx context.Context, client *http.Client, b *backend) bool {
	u := *b.url
	u.Path = strings.TrimSuffix(u.Path, "/") + rt.cfg.Health.Path
	return health.Check(ctx, client, u.String())
}

func (g *Gateway) recheckLoop(ctx context.Context, rt *routing) {
	every(ctx, g.recheck, rt.cfg.Health.PassiveRecheckSeconds, func() { g.RecheckPassive(ctx) })
}
