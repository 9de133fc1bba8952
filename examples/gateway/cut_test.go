package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// How a cutServer ends a response it has begun.
const (
	closeConn = iota // close the connection
	resetConn        // close it with an RST
	stallConn        // send nothing more until the gateway closes it
)

// cutServer is a backend that answers every request with head and the first bytes of its
// body, then ends it as end says, before the body's end.
func cutServer(t *testing.T, head, body string, end int) string {
	t.Helper()
	return requestServer(t, func(c net.Conn, _ *http.Request) {
		_, _ = io.WriteString(c, head+body)
		switch end {
		case resetConn:
			_ = c.(*net.TCPConn).SetLinger(0)
		case stallConn:
			_, _ = io.Copy(io.Discard, c) // until the gateway closes the connection
		}
	})
}

// records is a slog.Handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }

func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}

// warnings returns the messages of the records at Warn or above.
func (h *records) warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level >= slog.LevelWarn {
			out = append(out, r.Message)
		}
	}
	return out
}

// requestsByClass returns MetricRequests' non-zero samples as "class/source" -> count.
func requestsByClass(t *testing.T, g *gateway.Gateway) map[string]float64 {
	t.Helper()
	mfs, err := g.Registry().Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == gateway.MetricRequests {
			for _, m := range mf.GetMetric() {
				if v := m.GetCounter().GetValue(); v > 0 {
					got[m.GetLabel()[0].GetValue()+"/"+m.GetLabel()[1].GetValue()] = v
				}
			}
		}
	}
	return got
}

// A backend that cuts its response after the headers, before the end of the body (short
// of its Content-Length, or before a chunked stream's last chunk; closed, reset, or
// stalled past stream_idle_seconds), has failed: each cut is one connection failure for
// outlier detection, so three in a row (consecutive_connect_failures 3) eject it although
// every response began with a 200; each is logged as one Warn naming the backend; a
// forwarded stream counts as code_class backend_closed, and a JSON body the gateway reads
// whole (to inject x_agent_serve) is answered 502 (504 for a stall) by the gateway. Every
// lease is released. (Before: never ejected — the 200 headers reset the streak each time;
// the streams counted as 2xx; and a JSON body read whole logged two Warn lines per cut.)
func TestBackendCutMidBody(t *testing.T) {
	const (
		jsonHead = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
		sseHead  = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
		sseChunk = "a\r\ndata: {}\n\n\r\n" // one 10-byte chunk, no last chunk
	)
	tests := []struct {
		name      string
		head      string
		body      string
		end       int    // closeConn, resetConn, stallConn
		inject    bool   // inject_metadata: the JSON body is read whole in ModifyResponse
		wantClass string // MetricRequests of the cut requests, "class/source"
		// What the client sees: "502" or "504" (the gateway's answer), "cut" (a 200 whose
		// body ends early) or "dropped" (the connection closes before the headers: a
		// response that is not flushed as it goes had its headers still in the server's
		// buffer).
		client string
	}{
		{"JSON read whole, short of its Content-Length", jsonHead, `{"id":"x",`, closeConn, true, "5xx/gateway", "502"},
		{"JSON read whole, reset", jsonHead, `{"id":"x",`, resetConn, true, "5xx/gateway", "502"},
		{"JSON read whole, stalled", jsonHead, `{"id":"x",`, stallConn, true, "5xx/gateway", "504"},
		{"JSON streamed through, short of its Content-Length", jsonHead, `{"id":"x",`, closeConn, false, "backend_closed/backend", "dropped"},
		{"SSE cut before its last chunk", sseHead, sseChunk, closeConn, false, "backend_closed/backend", "cut"},
		{"SSE reset", sseHead, sseChunk, resetConn, false, "backend_closed/backend", "cut"},
		{"SSE stalled", sseHead, sseChunk, stallConn, false, "backend_closed/backend", "cut"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				logs := &records{}
				cfg := gateway.Config{
					Backends: []gateway.BackendConfig{
						{ID: "b0", URL: cutServer(t, tt.head, tt.body, tt.end)},
						{ID: "b1", URL: cutServer(t, tt.head, tt.body, tt.end)},
					},
					Timeouts:         gateway.TimeoutsConfig{StreamIdleSeconds: 0.05}, // only the stalls reach it
					Health:           gateway.HealthConfig{Enabled: new(false)},
					OutlierDetection: gateway.OutlierConfig{ConsecutiveConnectFailures: 3},
					InjectMetadata:   new(tt.inject),
				}
				g, err := gateway.New(cfg, gateway.WithLogger(slog.New(logs)))
				require.NoError(t, err)
				t.Cleanup(g.Close)
				ts := newFront(t, server, g, nil)
				t.Cleanup(ts.Close)

				var served string
				for i := range 3 {
					req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
					require.NoError(t, err)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Session-ID", "s1")
					resp, err := ts.Client().Do(req)
					if tt.client == "dropped" {
						require.ErrorIs(t, err, io.EOF)
					} else {
						require.NoError(t, err)
						_, err = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						switch tt.client {
						case "cut":
							require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the client sees the body cut")
							require.Equal(t, http.StatusOK, resp.StatusCode)
						case "502":
							require.NoError(t, err)
							require.Equal(t, http.StatusBadGateway, resp.StatusCode)
						case "504":
							require.NoError(t, err)
							require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
						}
					}
					if i == 2 {
						break // the third cut ejects the backend: its binding is broken
					}
					bound, ok := g.Scheduler().Lookup("s1", "")
					require.True(t, ok, "the binding holds until the ejection")
					if i == 0 {
						served = bound
					}
					assert.Equal(t, served, bound, "the binding holds until the ejection")
					assert.Empty(t, g.PassivelyDown(), "%d cut(s) of three", i+1)
				}
				ts.Close() // waits for the handlers

				assert.Equal(t, []string{served}, g.PassivelyDown(), "three cuts in a row eject the backend")
				warn := "backend response body read failed"
				if tt.end == stallConn {
					warn = "backend stream stalled"
				}
				assert.Equal(t, []string{warn, warn, warn, "backend state change"}, logs.warnings(),
					"one Warn per cut, then the ejection")
				assert.Equal(t, map[string]float64{tt.wantClass: 3}, requestsByClass(t, g))
				for _, id := range []string{"b0", "b1"} {
					assert.Zero(t, g.Scheduler().Load(id).Requests, "backend %s: lease released", id)
				}
			})
		})
	}
}
