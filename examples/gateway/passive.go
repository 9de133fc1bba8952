package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"

	"github.com/agentserve/sessionaffinity/health"
)

// retryTransport implements passive health checking: a connection error (refused,
// reset, closed before any response byte) marks the backend down in the scheduler
// and, when retry_on_connect_error is on, the request is replayed once on the next
// choice. Nothing has been written to the client at that point: RoundTrip has not
// returned a response yet.
type retryTransport struct{ g *Gateway }

// RoundTrip sends req to its backend; on a connection error it marks that backend down
// and, if retries are on, replays req once on the scheduler's next choice.
func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	g := t.g
	resp, err := g.base.RoundTrip(req)
	if err == nil {
		return resp, nil
	}
	st := routeFrom(req.Context())
	if st == nil || req.Context().Err() != nil || !IsConnectError(err) {
		return nil, err
	}
	failed, _ := st.current()
	g.markPassiveDown(failed.id, err)
	if !st.rt.cfg.retryOnConnectError() {
		return nil, err
	}
	st.mu.Lock()
	if st.retried {
		st.mu.Unlock()
		return nil, err
	}
	st.retried = true
	st.mu.Unlock()

	next, hit, serr := st.choose()
	if serr != nil || next.id == failed.id {
		g.log.Warn("no backend to retry on", "failed", failed.id, "err", serr)
		return nil, err
	}
	st.mu.Lock()
	st.backend, st.hit = next, hit
	st.mu.Unlock()
	g.log.Info("retrying request on next backend", "failed", failed.id, "backend", next.id)

	out := req.Clone(req.Context())
	out.URL = cloneURL(st.in)
	(&httputil.ProxyRequest{In: st.in, Out: out}).SetURL(next.url)
	if req.GetBody != nil {
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		out.Body = body
	}
	resp, err = g.base.RoundTrip(out)
	if err != nil && out.Context().Err() == nil && IsConnectError(err) {
		g.markPassiveDown(next.id, err)
	}
	return resp, err
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

func (g *Gateway) markPassiveDown(id string, err error) {
	n := g.state().sched.OnBackendDown(id)
	g.mu.Lock()
	first := !g.passive[id]
	g.passive[id] = true
	g.mu.Unlock()
	if first {
		g.log.Warn("backend marked down by connection error", "backend", id, "bindings_broken", n, "err", err)
	}
}

// PassivelyDown returns the IDs of backends currently held down by a connection
// error and awaiting their re-check, in configuration order (nil if none). Safe for
// concurrent use; O(backends), allocates the result.
func (g *Gateway) PassivelyDown() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	for _, b := range g.state().backends {
		if g.passive[b.id] {
			ids = append(ids, b.id)
		}
	}
	return ids
}

// RecheckPassive checks every passively downed backend once (GET <url><health.path>)
// and brings back, via Scheduler.OnBackendUp, those answering 2xx — unless the active
// prober currently holds them Down, in which case the prober decides. It blocks until
// the checks are done — one at a time, each bounded by health.timeout_seconds (default
// 2 s) — and returns the IDs brought back (nil if none). Safe for concurrent use.
func (g *Gateway) RecheckPassive(ctx context.Context) []string {
	var up []string
	for _, id := range g.PassivelyDown() {
		rt := g.state()
		b := rt.byID[id]
		if b == nil { // removed by a reload since
			continue
		}
		if rt.prober != nil && rt.prober.State(id) == health.Down {
			continue
		}
		if !rt.checkHealth(ctx, g.checker, b) {
			continue
		}
		g.mu.Lock()
		delete(g.passive, id)
		g.mu.Unlock()
		rt.sched.OnBackendUp(id)
		g.log.Info("backend back after passive re-check", "backend", id)
		up = append(up, id)
	}
	return up
}

// ProbeOnce runs one synchronous round of the active prober over every backend and
// applies the resulting transitions to the scheduler before it returns. It is a no-op
// when health.enabled is false. [Gateway.Run] does this every interval on its own.
func (g *Gateway) ProbeOnce(ctx context.Context) {
	if p := g.state().prober; p != nil {
		p.ProbeOnce(ctx)
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
