package gateway_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// step is what the scripted transport does on one attempt.
type step struct {
	reused    bool  // GotConn reports a reused keep-alive connection
	wrote     bool  // WroteRequest reports the whole request written
	responded bool  // GotFirstResponseByte is called (a 1xx or part of a head arrived)
	err       error // returned instead of a response
	hang      bool  // block until the request's context is done
	status    int   // response status when err is nil and !hang (0: 200)
}

// scripted is a RoundTripper playing steps in order (then 200s), recording the host of
// every attempt.
type scripted struct {
	mu    sync.Mutex
	steps []step
	hosts []string
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	st := step{wrote: true}
	if len(s.hosts) < len(s.steps) {
		st = s.steps[len(s.hosts)]
	}
	s.hosts = append(s.hosts, req.URL.Host)
	s.mu.Unlock()
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
	}
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil {
		if tr.GotConn != nil {
			tr.GotConn(httptrace.GotConnInfo{Reused: st.reused})
		}
		if st.wrote && tr.WroteRequest != nil {
			tr.WroteRequest(httptrace.WroteRequestInfo{})
		}
		if st.responded && tr.GotFirstResponseByte != nil {
			tr.GotFirstResponseByte()
		}
	}
	if st.hang {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if st.err != nil {
		return nil, st.err
	}
	return &http.Response{StatusCode: max(st.status, 200), Header: http.Header{"Content-Type": {"text/plain"}},
		Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: req}, nil
}

var (
	errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connection refused"}}
	errReset   = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	errIdle    = errors.New("http: server closed idle connection") // net/http's errServerClosedIdle
)

// Point 3: which failures are retried, where, and which count towards ejection.
// consecutive_connect_failures is 1 here, so a counted failure shows as an ejection.
func TestRetryRules(t *testing.T) {
	tests := []struct {
		name       string
		steps      []step
		header     string // an Idempotency-Key, if set
		noRetry    bool
		wantStatus int
		wantHosts  string // "same", "other" or "one" (no retry)
		wantEject  bool
	}{
		{"stale keep-alive, nothing written: same backend again, not counted",
			[]step{{reused: true, err: io.EOF}}, "", false, 200, "same", false},
		{"backend closed idle conn after POST written: not replayable, not counted",
			[]step{{reused: true, wrote: true, err: errIdle}}, "", false, 502, "one", false},
		{"same with Idempotency-Key: replayed on the same backend",
			[]step{{reused: true, wrote: true, err: errIdle}}, "k1", false, 200, "same", false},
		{"two stale conns: second retry goes elsewhere, not counted",
			[]step{{reused: true, err: io.EOF}, {reused: true, err: io.EOF}}, "", false, 200, "other", false},
		{"reused conn closed after response bytes (a 1xx): not stale, counted, another backend",
			[]step{{reused: true, wrote: true, responded: true, err: io.ErrUnexpectedEOF}}, "k1", false, 200, "other", true},
		{"dial refused: counted, retried on another backend",
			[]step{{err: errRefused}}, "", false, 200, "other", true},
		{"reset after POST written on a fresh conn: counted, not retried",
			[]step{{wrote: true, err: errReset}}, "", false, 502, "one", true},
		{"retry off: counted, not retried",
			[]step{{err: errRefused}}, "", true, 502, "one", true},
		{"no response headers in time: 504, counted",
			[]step{{wrote: true, hang: true}}, "", false, 504, "one", true},
		{"one 5xx: passed through, not ejected (threshold 5)",
			[]step{{wrote: true, status: 500}}, "", false, 500, "one", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &scripted{steps: tt.steps}
			cfg := gateway.Config{
				Backends: []gateway.BackendConfig{
					{ID: "a", URL: "http://a.test"}, {ID: "b", URL: "http://b.test"}, {ID: "c", URL: "http://c.test"},
				},
				Health:           gateway.HealthConfig{Enabled: new(false)},
				OutlierDetection: gateway.OutlierConfig{ConsecutiveConnectFailures: 1},
				Timeouts:         gateway.TimeoutsConfig{ResponseHeaderSeconds: 0.05},
			}
			if tt.noRetry {
				cfg.RetryOnConnectError = new(false)
			}
			g, err := gateway.New(cfg, gateway.WithTransport(rt))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			req.Header.Set("X-Session-ID", "s1")
			if tt.header != "" {
				req.Header.Set("Idempotency-Key", tt.header)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			assert.Equal(t, tt.wantStatus, rec.Code, rec.Body.String())
			switch tt.wantHosts {
			case "one":
				assert.Len(t, rt.hosts, 1)
			case "same":
				require.Len(t, rt.hosts, 2)
				assert.Equal(t, rt.hosts[0], rt.hosts[1])
			case "other":
				require.GreaterOrEqual(t, len(rt.hosts), 2)
				assert.NotEqual(t, rt.hosts[0], rt.hosts[len(rt.hosts)-1])
			}
			if tt.wantEject {
				assert.Equal(t, []string{strings.TrimSuffix(rt.hosts[0], ".test")}, g.PassivelyDown())
			} else {
				assert.Empty(t, g.PassivelyDown())
			}
			if rec.Code >= 500 && rec.Code != 500 {
				assert.Equal(t, "application/json", rec.Header().Get("Content-Type"), "gateway errors are JSON")
			}
			reqs, bytes := g.InFlight()
			assert.Zero(t, reqs+bytes)
		})
	}
}

// Point 3: a streak only counts within window_seconds; a success resets it.
func TestOutlierWindowAndReset(t *testing.T) {
	clk := newTestClock()
	fail := step{err: errRefused}
	rt := &scripted{steps: []step{fail, fail, {}, fail, fail, fail, fail, fail}}
	g, err := gateway.New(gateway.Config{
		Backends:            []gateway.BackendConfig{{ID: "a", URL: "http://a.test"}, {ID: "b", URL: "http://b.test"}},
		Health:              gateway.HealthConfig{Enabled: new(false)},
		RetryOnConnectError: new(false),
		OutlierDetection:    gateway.OutlierConfig{WindowSeconds: 10},
	}, gateway.WithTransport(rt), gateway.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	send := func() int {
		req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
		req.Header.Set("X-Session-ID", "s")
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		return rec.Code
	}
	assert.Equal(t, 502, send())
	assert.Equal(t, 502, send())
	assert.Equal(t, 200, send(), "a success resets the streak")
	assert.Equal(t, 502, send())
	assert.Equal(t, 502, send())
	clk.Advance(11 * time.Second) // the streak is older than the window: this failure starts a new one
	assert.Equal(t, 502, send())
	assert.Empty(t, g.PassivelyDown())
	assert.Equal(t, 502, send())
	assert.Equal(t, 502, send())
	assert.Len(t, g.PassivelyDown(), 1, "three in a row within the window eject")
}

func newTestClock() *affinitytest.Clock { return affinitytest.NewClock(time.Unix(1_700_000_000, 0)) }

// The "retrying request" line names the backend whose attempt failed (backend and failed:
// err is that attempt's error) and the backend the request goes to (to).
func TestRetryLogNamesFailedAndTarget(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
		same  bool
	}{
		{"counted failure: another backend", []step{{err: errRefused}}, false},
		{"stale keep-alive: the same backend", []step{{reused: true, err: io.EOF}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, buf := captureLogs()
			rt := &scripted{steps: tt.steps}
			g, err := gateway.New(gateway.Config{
				Backends: []gateway.BackendConfig{
					{ID: "a", URL: "http://a.test"}, {ID: "b", URL: "http://b.test"}, {ID: "c", URL: "http://c.test"},
				},
				Health: gateway.HealthConfig{Enabled: new(false)},
			}, gateway.WithTransport(rt), gateway.WithLogger(log))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			req.Header.Set("X-Session-ID", "s1")
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code)
			require.Len(t, rt.hosts, 2)
			first, second := strings.TrimSuffix(rt.hosts[0], ".test"), strings.TrimSuffix(rt.hosts[1], ".test")
			assert.Equal(t, tt.same, first == second)

			var line map[string]any
			for l := range strings.Lines(buf.String()) {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(l), &m))
				if m["msg"] == "retrying request" {
					require.Nil(t, line, "one retry line")
					line = m
				}
			}
			require.NotNil(t, line, buf.String())
			assert.Equal(t, first, line["backend"], "backend is the failed one")
			assert.Equal(t, first, line["failed"])
			assert.Equal(t, second, line["to"])
			assert.NotEmpty(t, line["err"])
		})
	}
}
