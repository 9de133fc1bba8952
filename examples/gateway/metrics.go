package gateway

import (
	"errors"
	"net/http"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentserve/sessionaffinity/health"
)

// Gateway metric names (besides the library's agentserve_affinity_* series).
const (
	// MetricRequests counts proxied-path requests by code_class ("2xx" .. "5xx": the class
	// of the status sent; "client_closed" when the client went away before the response
	// ended, before any answer or after the headers, e.g. a stream cancelled mid-body or
	// an upload abandoned before the end of its body;
	// "backend_closed" when the response ended early by the backend's fault after its
	// headers: the backend closed or reset the connection before the end of the body, e.g.
	// a stream whose backend died, or went silent for stream_idle_seconds and the gateway
	// cut it) and source ("backend": the
	// backend's status; "gateway": an error the gateway generated, e.g. 502, 503, 504;
	// backend_closed is always "backend").
	MetricRequests = "agentserve_gateway_requests_total"
	// MetricBackendUp is 1 for a backend that can take requests (Healthy or Draining),
	// 0 for one that is Down or ejected; label backend (configured backends only).
	MetricBackendUp = "agentserve_backend_up"
	// MetricBackendState is 1 for the backend's current state and 0 for the others;
	// labels backend and state ("healthy", "draining", "down", "ejected").
	MetricBackendState = "agentserve_backend_state"
	// MetricBackendEjections counts outlier-detection ejections; label backend.
	MetricBackendEjections = "agentserve_backend_ejections_total"
	// MetricInflightRequests is the proxied requests in flight now, as
	// limits.max_inflight_requests counts them (once their body is read): see
	// [Gateway.InFlight]. No labels.
	MetricInflightRequests = "agentserve_gateway_inflight_requests"
	// MetricInflightBytes is the bytes reserved now against limits.max_inflight_bytes
	// (request bodies, also those still arriving, salted copies and buffered responses):
	// see [Gateway.InFlight]. No labels.
	MetricInflightBytes = "agentserve_gateway_inflight_bytes"
)

// backendStates are the values of the state label of MetricBackendState.
var backendStates = [...]string{"healthy", "draining", "down", "ejected"}

// registerGatewayMetrics registers the request counter and the per-backend collector,
// which reads the health set and the outlier detector at scrape time.
func (g *Gateway) registerGatewayMetrics() error {
	g.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRequests,
		Help: "Requests on proxied paths by status class (2xx..5xx, client_closed, backend_closed) and source (backend, gateway).",
	}, []string{"code_class", "source"})
	for _, c := range []string{"2xx", "4xx", "5xx", "backend_closed"} { // dashboards see 0, not a missing series
		g.requests.WithLabelValues(c, "backend")
	}
	g.requests.WithLabelValues("4xx", "gateway")
	g.requests.WithLabelValues("5xx", "gateway")
	g.outcomes.vec = g.requests
	if err := g.reg.Register(g.requests); err != nil {
		return err
	}
	inflight := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricInflightRequests,
			Help: "Proxied requests in flight (counted once their body is read), against limits.max_inflight_requests.",
		}, func() float64 { return float64(g.limits.reqs.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricInflightBytes,
			Help: "Bytes reserved against limits.max_inflight_bytes (request bodies as they arrive, salted copies, buffered responses).",
		}, func() float64 { return float64(g.limits.bytes.Load()) }),
	}
	for _, c := range inflight {
		if err := g.reg.Register(c); err != nil {
			return err
		}
	}
	if err := g.reloadStats.register(g.reg); err != nil { // reload_metrics.go
		return err
	}
	return g.reg.Register(backendCollector{g})
}

var (
	descUp        = prometheus.NewDesc(MetricBackendUp, "1 when the backend can take requests (healthy or draining), 0 when down or ejected.", []string{"backend"}, nil)
	descState     = prometheus.NewDesc(MetricBackendState, "1 for the backend's current state (healthy, draining, down, ejected), 0 for the others.", []string{"backend", "state"}, nil)
	descEjections = prometheus.NewDesc(MetricBackendEjections, "Ejections of the backend by outlier detection.", []string{"backend"}, nil)
)

// backendCollector exports the state of every configured backend at scrape time.
type backendCollector struct{ g *Gateway }

// Describe sends the three per-backend descriptors.
func (c backendCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUp
	ch <- descState
	ch <- descEjections
}

// Collect reads each configured backend's state; O(backends).
func (c backendCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.g.state().backends {
		state, ejections := c.g.backendState(b.id)
		up := 0.0
		if state == "healthy" || state == "draining" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, b.id)
		for _, s := range backendStates {
			v := 0.0
			if s == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, b.id, s)
		}
		ch <- prometheus.MustNewConstMetric(descEjections, prometheus.CounterValue, float64(ejections), b.id)
	}
}

// backendState is a backend's state for metrics and /readyz: "ejected" while outlier
// detection holds it, else its health-set state.
func (g *Gateway) backendState(id string) (string, uint64) {
	var ejected bool
	var total uint64
	g.outliers.mu.Lock()
	if s := g.outliers.state[id]; s != nil {
		ejected, total = s.ejected, s.total
	}
	g.outliers.mu.Unlock()
	if ejected {
		return "ejected", total
	}
	return g.state().sched.Health().State(id).String(), total
}

// serveReady answers /readyz: 200 {"status":"ready"} when at least one backend can take
// requests (not Down, not ejected), else 503 {"status":"not_ready"}; under
// [Gateway.Serve], 503 {"status":"starting"} while it loads the binding snapshot and
// 503 {"status":"draining"} once its shutdown drain has begun, whatever the backends
// (the main listener is closed then; the admin listener still answers). Each lists
// every backend's state.
func (g *Gateway) serveReady(w http.ResponseWriter) {
	rt := g.state()
	states := make(map[string]string, len(rt.backends))
	ready := false
	for _, b := range rt.backends {
		s, _ := g.backendState(b.id)
		states[b.id] = s
		ready = ready || rt.sched.Health().State(b.id) != health.Down
	}
	body := map[string]any{"status": "ready", "backends": states}
	if phase := g.readiness(); phase != "" || !ready {
		body["status"] = "not_ready"
		if phase != "" {
			body["status"] = phase
		}
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// outcomeWriter records the status a proxied request was answered with, whether the
// gateway generated it, and whether the client went away before the response ended.
type outcomeWriter struct {
	http.ResponseWriter
	code    int
	gateway bool
	copying bool // the ReverseProxy is answering (set around its ServeHTTP)
	gone    bool // the client went away before the response ended (a write or flush failed, or its context ended mid-copy)
	cut     bool // the backend cut or stalled the response body after its headers (route.cut)
	shut    bool // the shutdown drain's end cut the response (errDrainCut, streamerr.go): counted as gone
	http10  bool // the client's request is HTTP/1.0 (or older): it gets no 1xx but a 101
	stalled bool // a write to the client hit its deadline (timeouts.client_write_seconds)
	wbound  writeBound
}

// WriteHeader records the first final status and passes it on. Informational responses
// forwarded from the backend (ReverseProxy's Got1xxResponse) are filtered: a 100
// Continue is dropped always — the gateway answers a client's Expect: 100-continue itself
// when it reads the body (net/http's server, not through WriteHeader) and does not
// forward Expect, so a backend's 100 would be a second one, or one the client never
// asked for — and every 1xx but 101 is dropped for an HTTP/1.0 client, which must not be
// sent one (RFC 9110 §15.2; it cannot have asked for a 101). Other 1xx (103 Early Hints)
// reach HTTP/1.1 and later clients. ReverseProxy clears the header map after each 1xx,
// so a dropped one's headers do not leak into the final response.
func (w *outcomeWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols &&
		(code == http.StatusContinue || w.http10) {
		return
	}
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	if code < 200 { // net/http writes an interim response at once
		w.wbound.renew()
		// A 103 Early Hints the ReverseProxy relays: its header is the backend's, copied
		// here unfiltered; the gateway's own X-Agent-Serve-* names are not the backend's
		// to send (ownheaders.go). A 101's header went through modifyResponse already, and
		// holds the gateway's.
		if code != http.StatusSwitchingProtocols {
			stripOwnHeaders(w.ResponseWriter.Header())
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and passes the bytes on; an error means the client went
// away.
func (w *outcomeWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.wbound.renew()
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.failed(err)
	}
	return n, err
}

// failed records that a write or flush to the client failed: the client went away, or
// stopped reading until the write deadline.
func (w *outcomeWriter) failed(err error) {
	w.gone = true
	w.stalled = w.stalled || errors.Is(err, os.ErrDeadlineExceeded)
}

// FlushError flushes the underlying writer, if it can; an error other than "not
// supported" means the client went away. (http.ResponseController prefers it to Flush.)
func (w *outcomeWriter) FlushError() error {
	w.wbound.renew()
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		w.failed(err)
	}
	return err
}

// Flush is FlushError without the error.
func (w *outcomeWriter) Flush() { _ = w.FlushError() }

// Unwrap returns the underlying writer (for http.ResponseController).
func (w *outcomeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// codeClasses are the code_class values of MetricRequests by index: 1xx..5xx at 1..5,
// client_closed at 0, backend_closed at classBackendClosed.
var codeClasses = [...]string{"client_closed", "1xx", "2xx", "3xx", "4xx", "5xx", "backend_closed"}

// classBackendClosed is the index of backend_closed in codeClasses.
const classBackendClosed = 6

// outcomeCounters caches the children of MetricRequests by code class and source, so
// that counting a request neither builds a label string nor hashes label values (the
// CounterVec lookup costs about as much as the rest of the metrics path). A child is
// made on first use, so only the series that occurred (and the ones
// registerGatewayMetrics made up front) are exported. Safe for concurrent use.
type outcomeCounters struct {
	vec   *prometheus.CounterVec
	cells [len(codeClasses)][2]outcomeCell // [class][0: backend, 1: gateway]
}

type outcomeCell struct {
	once sync.Once
	c    prometheus.Counter
}

// get returns the counter of class index ci and source gateway (true) or backend.
func (o *outcomeCounters) get(ci int, gateway bool) prometheus.Counter {
	si, source := 0, "backend"
	if gateway {
		si, source = 1, "gateway"
	}
	cell := &o.cells[ci][si]
	cell.once.Do(func() { cell.c = o.vec.WithLabelValues(codeClasses[ci], source) })
	return cell.c
}

// countOutcome adds the request to MetricRequests: backend_closed when the backend cut
// or stalled the body of the response being forwarded (seen before the client left: the
// cut is what ended it), else the class of the status sent, or client_closed when the client went
// away before the response ended — before any status, or after it (a stream cancelled
// mid-body), so that a cancel counts the same whether or not the headers had gone out.
// A cut the gateway answered itself (a JSON body read whole to inject metadata: a 502 or
// 504) counts as that answer. 0 allocs.
func (g *Gateway) countOutcome(w *outcomeWriter) {
	ci := 0 // client_closed
	switch {
	case w.cut && !w.gateway:
		ci = classBackendClosed
	case w.code >= 100 && w.code < 600 && !w.gone && !w.shut:
		ci = w.code / 100
	}
	g.outcomes.get(ci, w.gateway).Inc()
}
