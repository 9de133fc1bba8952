package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// probeCauses keeps, per backend ID, why its last active health check failed ("" or
// absent: it passed, or none ran yet), for the "backend state change" line of a backend
// the prober marks Down. Safe for concurrent use.
type probeCauses struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *probeCauses) set(id, cause string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cause == "" {
		delete(c.m, id)
		return
	}
	if c.m == nil {
		c.m = make(map[string]string)
	}
	c.m[id] = cause
}

// get returns why id's last check failed, "" if it did not (or none is known).
func (c *probeCauses) get(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

func (c *probeCauses) forget(id string) { c.set(id, "") }

// probeRecorder is the active prober's transport: next, recording in causes the outcome
// of each probe of a backend it knows (ids: probe URL, as url.URL.String gives it, ->
// backend ID; read-only), so that a Down can say why. A redirected probe is recorded
// under the URL it started from, its last hop's outcome winning. The causes are a fixed
// vocabulary (connection refused, timeout, status N, body read failure...), never the
// error text: a health check's line says no more than the gateway's other lines.
type probeRecorder struct {
	next   http.RoundTripper
	ids    map[string]string
	causes *probeCauses
}

func (p *probeRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	first := req
	for first.Response != nil && first.Response.Request != nil {
		first = first.Response.Request
	}
	id, known := p.ids[first.URL.String()]
	resp, err := p.next.RoundTrip(req)
	if !known {
		return resp, err
	}
	switch {
	case err != nil:
		p.causes.set(id, probeErrorCause(err))
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		p.causes.set(id, "status "+strconv.Itoa(resp.StatusCode))
	default:
		p.causes.set(id, "")
		resp.Body = &probeBody{ReadCloser: resp.Body, id: id, causes: p.causes}
	}
	return resp, err
}

// probeBody records a failure to read a 2xx probe response's body (health.Check reads
// up to 4 KiB of it and fails the check when that breaks off or stalls).
type probeBody struct {
	io.ReadCloser
	id     string
	causes *probeCauses
}

func (b *probeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		cause := "body read failure"
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			cause = "timeout reading the body"
		}
		b.causes.set(b.id, cause)
	}
	return n, err
}

// probeErrorCause names the failure of a probe that got no response.
func probeErrorCause(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before a response"
	case IsConnectError(err):
		return "connection failed"
	default:
		return "request failed"
	}
}

// probeTransport wraps next for the prober of rt: probe URLs of rt's backends (base URL
// without its trailing "/", plus health.path, as the prober builds them) -> backend ID.
func (g *Gateway) probeTransport(rt *routing, next http.RoundTripper) http.RoundTripper {
	ids := make(map[string]string, len(rt.backends))
	for _, b := range rt.backends {
		if u, err := url.Parse(strings.TrimSuffix(b.url.String(), "/") + rt.cfg.Health.Path); err == nil {
			ids[u.String()] = b.id
		}
	}
	return &probeRecorder{next: next, ids: ids, causes: &g.probeCauses}
}

// probeDownWhy is the why of a "backend state change" to Down by the active check:
// "active health check: GET <path> now down (<cause>)", the cause left out when unknown.
func (g *Gateway) probeDownWhy(id, path string) string {
	why := "active health check: GET " + path + " now down"
	if cause := g.probeCauses.get(id); cause != "" {
		why += " (" + cause + ")"
	}
	return why
}
