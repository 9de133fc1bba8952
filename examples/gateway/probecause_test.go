package gateway_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

// healthScript is a backend transport for two hosts, a.test and b.test: b.test's health
// check answers with its current probe function, every other request with 200 (or, when
// refuse is set, a refused connection for b.test's generation requests).
type healthScript struct {
	mu     sync.Mutex
	probe  func(*http.Request) (*http.Response, error)
	refuse bool
}

func (s *healthScript) set(probe func(*http.Request) (*http.Response, error)) {
	s.mu.Lock()
	s.probe = probe
	s.mu.Unlock()
}

func (s *healthScript) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	probe, refuse := s.probe, s.refuse
	s.mu.Unlock()
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
	}
	if req.URL.Host == "b.test" {
		if req.URL.Path == "/health" && probe != nil {
			return probe(req)
		}
		if req.URL.Path != "/health" && refuse {
			return nil, refusedErr
		}
	}
	return answer(req, http.StatusOK, io.NopCloser(strings.NewReader("{}"))), nil
}

var refusedErr = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func answer(req *http.Request, status int, body io.ReadCloser) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Request: req}
}

// failingBody returns some bytes, then err.
type failingBody struct {
	err  error
	done bool
}

func (b *failingBody) Read(p []byte) (int, error) {
	if !b.done {
		b.done = true
		return copy(p, "{"), nil
	}
	return 0, b.err
}
func (b *failingBody) Close() error { return nil }

// twoBackends builds a gateway over a.test and b.test on tr, with the active check
// failing at the first failure and passing at the first success.
func twoBackends(t *testing.T, tr http.RoundTripper, logs *records, opts ...gateway.Option) *gateway.Gateway {
	t.Helper()
	g, err := gateway.New(gateway.Config{
		Backends:            []gateway.BackendConfig{{ID: "a", URL: "http://a.test"}, {ID: "b", URL: "http://b.test"}},
		Health:              gateway.HealthConfig{ProbeConfig: health.ProbeConfig{FailureThreshold: 1, SuccessThreshold: 1}},
		RetryOnConnectError: new(false),
		OutlierDetection:    gateway.OutlierConfig{ConsecutiveConnectFailures: 1, BaseEjectionSeconds: 10},
	}, append([]gateway.Option{gateway.WithTransport(tr), gateway.WithLogger(slog.New(logs))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g
}

// whys returns the why of each "backend state change" record.
func (h *records) whys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Message == "backend state change" {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "why" {
					out = append(out, a.Value.String())
				}
				return true
			})
		}
	}
	return out
}

// An active check's Down line says why the check failed, in a fixed vocabulary (never
// the error's text): connection refused, timeout, status N, a failed body read.
// (Before: "active health check: GET /health now down", no cause: tester32 #6b.)
func TestActiveCheckDownSaysWhy(t *testing.T) {
	const prefix = "active health check: GET /health now down"
	tests := []struct {
		name  string
		probe func(*http.Request) (*http.Response, error)
		want  string
	}{
		{"refused", func(*http.Request) (*http.Response, error) { return nil, refusedErr }, " (connection refused)"},
		{"timeout", func(*http.Request) (*http.Response, error) {
			return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}, " (timeout)"},
		{"deadline", func(*http.Request) (*http.Response, error) { return nil, context.DeadlineExceeded }, " (timeout)"},
		{"status", func(req *http.Request) (*http.Response, error) {
			return answer(req, http.StatusServiceUnavailable, io.NopCloser(strings.NewReader("secret detail"))), nil
		}, " (status 503)"},
		{"body breaks off", func(req *http.Request) (*http.Response, error) {
			return answer(req, http.StatusOK, &failingBody{err: io.ErrUnexpectedEOF}), nil
		}, " (body read failure)"},
		{"body stalls", func(req *http.Request) (*http.Response, error) {
			return answer(req, http.StatusOK, &failingBody{err: os.ErrDeadlineExceeded}), nil
		}, " (timeout reading the body)"},
		{"other error", func(*http.Request) (*http.Response, error) { return nil, errors.New("secret detail") }, " (request failed)"},
		{"redirect, not followed", func(req *http.Request) (*http.Response, error) {
			if req.URL.Path != "/health" { // followed: the target answers 200
				return answer(req, http.StatusOK, http.NoBody), nil
			}
			resp := answer(req, http.StatusFound, http.NoBody)
			resp.Header.Set("Location", "http://192.0.2.1/elsewhere")
			return resp, nil
		}, " (status 302)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &records{}
			tr := &healthScript{}
			tr.set(tt.probe)
			g := twoBackends(t, tr, logs)
			g.ProbeOnce(context.Background())
			assert.Equal(t, []string{"healthy->down WARN"}, logs.stateChanges())
			assert.Equal(t, []string{prefix + tt.want}, logs.whys())
			tr.set(nil)
			g.ProbeOnce(context.Background())
			assert.Equal(t, "active health check: GET /health now healthy", logs.whys()[1])
		})
	}
}

// A backend whose outlier ejection ends while the active check holds it Down goes from
// "down (ejected)" to "down": one "backend state change" line like every other (Warn:
// it stays down), whose why gives the check's last failure; its recovery is another.
// (Before: only an Info "backend ejection over; active health check still holds it down",
// not a state change line, though /readyz and agentserve_backend_state changed:
// tester32 #6a.)
func TestEjectionEndWhileActiveCheckDown(t *testing.T) {
	logs := &records{}
	tr := &healthScript{refuse: true}
	clk := newTestClock()
	g := twoBackends(t, tr, logs, gateway.WithClock(clk))
	ctx := context.Background()
	var ejected []string
	for i := 0; len(ejected) == 0 && i < 50; i++ { // until a session lands on b
		req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
		req.Header.Set("X-Session-ID", "s"+strings.Repeat("x", i))
		g.ServeHTTP(httptest.NewRecorder(), req)
		ejected = g.PassivelyDown()
	}
	require.Equal(t, []string{"b"}, ejected)

	tr.set(func(req *http.Request) (*http.Response, error) {
		return answer(req, http.StatusServiceUnavailable, http.NoBody), nil
	})
	g.ProbeOnce(ctx) // the active check fails too: no line, it is down already
	tr.set(nil)      // the recheck's GET passes, but the prober wants success_threshold probes
	clk.Advance(10 * time.Second)
	assert.Empty(t, g.RecheckPassive(ctx), "not brought back: the active check holds it down")
	g.ProbeOnce(ctx)

	assert.Equal(t, []string{"healthy->down (ejected) WARN", "down (ejected)->down WARN", "down->healthy INFO"}, logs.stateChanges())
	whys := logs.whys()
	require.Len(t, whys, 3)
	assert.Equal(t, "outlier detection: ejection time over and /health answered 2xx; the active health check still holds it "+
		"down (its last failure: status 503) until it passes success_threshold probes", whys[1])
	assert.Zero(t, logs.count("backend ejection over; active health check still holds it down"))
}
