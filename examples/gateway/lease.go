package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentserve/sessionaffinity/affinity"
)

// Load-awareness wiring: every generation call with a session is placed by
// affinity.Scheduler.Acquire with cost = request body bytes / 4 (a rough prompt-token
// estimate), and its lease is released (Lease.Done) when the response body has been
// copied to the client and closed — the end of a JSON response or SSE stream, a client
// cancel, a backend error — with the usage the backend reported: the "usage" object of a
// JSON response (found in its last 4 KiB when the body streams through unread), or of the
// last SSE chunk that carries one (vLLM sends it when the client asks for
// stream_options.include_usage). A retry on another backend releases the failed
// attempt's lease (with the attempt's error) and leases the backend it goes to, so the
// load and the usage are booked where the request is served (retryTarget, passive.go).
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
		h[HeaderOutcome] = st.headerSlot(2, o.String()) // canonical already
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
		st.mu.Unlock()
	}
	return b, hit, err
}

// forgetNewBinding removes the binding st's placement created on b — a generation call
// whose current lease came from Acquire with Outcome miss or rebind — when the backend
// answered status 404 or 405: the path does not exist there, nothing was generated, and
// keeping the binding would let a loop of POST /nope/completions with fresh session IDs
// evict every other session's binding (max_bindings is shared by all clients). Only a
// binding that still names b is removed (Lookup, then Forget: a concurrent request of
// the same session may rebind between the two, and that new binding is then removed —
// a race the Scheduler has no compare-and-delete for; its next turn is a miss). Counts
// nothing.
func (st *route) forgetNewBinding(b *backend, status int) {
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed || st.session == "" {
		return
	}
	st.mu.Lock()
	created := st.placed && st.lease != nil &&
		(st.lease.Outcome == affinity.OutcomeMiss || st.lease.Outcome == affinity.OutcomeRebind)
	st.mu.Unlock()
	if !created {
		return
	}
	if id, ok := st.rt.sched.Lookup(st.session, st.tier); ok && id == b.id {
		st.rt.sched.Forget(st.session, st.tier)
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
	l.Done(affinity.DoneInfo{PromptTokens: u.PromptTokens, CachedPromptTokens: u.PromptTokensDetails.CachedTokens,
		CompletionTokens: u.CompletionTokens, Err: err})
}

// usage is the OpenAI-compatible usage object (vLLM, SGLang, TGI's OpenAI API).
type usage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// usageOf returns the "usage" member of a JSON object (zero if absent or malformed).
// Cost: one pass (scanJSON) and a scan of the usage object's keys, 0 allocs.
func usageOf(data []byte) usage {
	top, obj, _ := scanJSON(data)
	if !obj {
		return usage{}
	}
	return usageValue(top.usage)
}

// usageValue decodes v, the raw value of a valid JSON object's "usage" member (nil:
// absent): zero if it is absent, not an object, or a count in it is not a non-negative
// integer (what decoding it into usage with encoding/json would reject). No decoding,
// 0 allocs.
func usageValue(v []byte) usage {
	if len(v) == 0 || v[0] != '{' {
		return usage{}
	}
	var u usage
	ok := tokenCount(v, 0, "prompt_tokens", &u.PromptTokens) && tokenCount(v, 0, "completion_tokens", &u.CompletionTokens)
	if d, found := member(v, 0, "prompt_tokens_details"); ok && found && len(d) > 0 && d[0] == '{' {
		ok = tokenCount(d, 0, "cached_tokens", &u.PromptTokensDetails.CachedTokens)
	}
	if !ok {
		return usage{}
	}
	return u
}

// tokenCount stores the integer member key of the object at obj[open] in *dst (absent or
// null: left zero) and reports false when it is something else.
func tokenCount(obj []byte, open int, key string, dst *int64) bool {
	v, found := member(obj, open, key)
	if !found || string(v) == "null" {
		return true
	}
	if len(v) == 0 || len(v) > 18 {
		return false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int64(c-'0')
	}
	*dst = n
	return true
}

// maxSSELine bounds the partial SSE line kept between reads; longer lines are skipped.
const maxSSELine = 1 << 20

// leaseBody wraps a response body: it releases the lease when closed (or at EOF) with the
// usage found — in the JSON body given at construction, or in the last SSE "data:" line
// that carries a usage object.
type leaseBody struct {
	io.ReadCloser
	st   *route
	sse  bool
	once sync.Once

	mu   sync.Mutex
	line []byte // partial SSE line
	last []byte // last data line with "usage"
	u    usage  // usage of a JSON body the gateway read whole
	json bool   // a JSON body streamed through: keep its tail
	tail []byte // the last up to 2 x maxJSONTail bytes of it
	err  error  // first read error other than EOF
}

// maxJSONTail is how much of the end of a streamed-through JSON body is kept to find its
// "usage" object (OpenAI-compatible servers put it last; it is a few hundred bytes).
const maxJSONTail = 4096

func (b *leaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.sse && n > 0 {
		b.scan(p[:n])
	}
	if b.json && n > 0 {
		b.keepTail(p[:n])
	}
	if err != nil {
		if err != io.EOF {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
		}
		b.finish()
	}
	return n, err
}

// scan feeds SSE bytes and remembers the last complete data line mentioning "usage".
func (b *leaseBody) scan(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(b.line)+len(p) <= maxSSELine {
				b.line = append(b.line, p...)
			} else {
				b.line = b.line[:0]
			}
			return
		}
		line := p[:i]
		if len(b.line) > 0 {
			b.line = append(b.line, line...)
			line = b.line
		}
		line = bytes.TrimRight(line, "\r")
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok && bytes.Contains(d, []byte(`"usage"`)) {
			b.last = append(b.last[:0], bytes.TrimSpace(d)...)
		}
		b.line = b.line[:0]
		p = p[i+1:]
	}
}

// keepTail appends p to the kept tail, dropping all but the last maxJSONTail bytes once
// it holds twice that (amortized O(1) per byte, bounded memory).
func (b *leaseBody) keepTail(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) >= maxJSONTail {
		b.tail = append(b.tail[:0], p[len(p)-maxJSONTail:]...)
		return
	}
	if len(b.tail)+len(p) > 2*maxJSONTail {
		keep := b.tail[len(b.tail)-(maxJSONTail-len(p)):]
		b.tail = append(b.tail[:0], keep...)
	}
	b.tail = append(b.tail, p...)
}

// usageInTail decodes the object after the last "usage" key in the tail of a JSON body.
func usageInTail(tail []byte) usage {
	i := bytes.LastIndex(tail, []byte(`"usage"`))
	if i < 0 {
		return usage{}
	}
	rest := bytes.TrimLeft(tail[i+len(`"usage"`):], " \t\r\n")
	rest, ok := bytes.CutPrefix(rest, []byte(":"))
	if !ok {
		return usage{}
	}
	var u usage
	if json.NewDecoder(bytes.NewReader(rest)).Decode(&u) != nil {
		return usage{}
	}
	return u
}

func (b *leaseBody) finish() {
	b.once.Do(func() {
		b.mu.Lock()
		u, err := b.u, b.err
		if b.sse && len(b.last) > 0 {
			u = usageOf(b.last)
		}
		if b.json && len(b.tail) > 0 {
			u = usageInTail(b.tail)
		}
		b.mu.Unlock()
		b.st.release(u, err)
	})
}

// Close closes the backend body and releases the lease.
func (b *leaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// wrapLease installs the lease-releasing body on resp (u: the usage of the JSON body
// when the gateway has already read it, else nil).
func wrapLease(st *route, resp *http.Response, u *usage) {
	mt, _ := mediaType(resp.Header.Get("Content-Type"))
	b := &st.lb // one per request: modifyResponse runs once
	b.ReadCloser, b.st, b.sse = resp.Body, st, mt == "text/event-stream"
	if u != nil {
		b.u = *u
	} else if mt == "application/json" {
		b.json = true // streamed through (inject_metadata off, or too large): scan its tail
	}
	resp.Body = b
}

// vLLM's queue gauges, read by [Gateway.ReportLoads].
const (
	vllmWaiting = "vllm:num_requests_waiting"
	vllmRunning = "vllm:num_requests_running"
	vllmKVCache = "vllm:kv_cache_usage_perc"
)

// maxMetricsBytes bounds a backend's /metrics page read by ReportLoads.
const maxMetricsBytes = 4 << 20

// ReportLoads reads every backend's /metrics page (Prometheus text format) and reports
// its vLLM queue gauges — vllm:num_requests_waiting, vllm:num_requests_running (summed
// over their series, e.g. per model) and vllm:kv_cache_usage_perc (the largest) — to the
// scheduler with affinity.Scheduler.ReportLoad. A backend whose page cannot be read, or
// has neither queue gauge, gets its report cleared. Each read uses the health checker's
// HTTP client (health.timeout_seconds). [Gateway.Run] calls it every
// load_report_seconds when that is > 0. Safe for concurrent use.
func (g *Gateway) ReportLoads(ctx context.Context) {
	rt := g.state()
	for _, b := range rt.backends {
		l, err := g.scrapeLoad(ctx, b)
		if err != nil {
			g.log.Debug("backend load report failed", "backend", b.id, "err", err)
		}
		if err := rt.sched.ReportLoad(b.id, l); err != nil {
			g.log.Warn("backend load report rejected", "backend", b.id, "err", err)
		}
	}
}

func (g *Gateway) scrapeLoad(ctx context.Context, b *backend) (affinity.BackendLoad, error) {
	var l affinity.BackendLoad
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(b.url.String(), "/")+"/metrics", nil)
	if err != nil {
		return l, err
	}
	resp, err := g.checker.Do(req)
	if err != nil {
		return l, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return l, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return l, err
	}
	sum := func(name string) (float64, bool) {
		mf, ok := mfs[name]
		if !ok {
			return 0, false
		}
		var v float64
		for _, m := range mf.GetMetric() {
			v += m.GetGauge().GetValue()
		}
		return v, true
	}
	w, okW := sum(vllmWaiting)
	r, okR := sum(vllmRunning)
	if !okW && !okR {
		return l, fmt.Errorf("no %s or %s on /metrics", vllmWaiting, vllmRunning)
	}
	l.Waiting, l.Running = count(w), count(r)
	if mf, ok := mfs[vllmKVCache]; ok {
		for _, m := range mf.GetMetric() {
			if v := m.GetGauge().GetValue(); v > l.KVCache { // NaN never is
				l.KVCache = min(v, 1)
			}
		}
	}
	return l, nil
}

// count converts a gauge value to a request count: NaN and negatives are 0.
func count(v float64) int64 {
	if !(v > 0) {
		return 0
	}
	return int64(min(v, 1<<53))
}
