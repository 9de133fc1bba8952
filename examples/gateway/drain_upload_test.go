package gateway_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An upload still sending its body when the shutdown drain ends (drain_seconds, or
// EndDrain) is answered a JSON 503 "shutdown" with Retry-After and Connection: close on
// its still-writable connection, logged once at Info as the drain's cut with its status
// and why, and counted 5xx by the gateway; no backend sees it. (Before, tester38: the
// connection was closed with no answer, and the cut was logged with backend "" and
// status 400.)
func TestDrainCutUpload(t *testing.T) {
	tests := []struct {
		name, drain string
		endDrain    bool
	}{
		{"EndDrain", "3600", true},
		{"drain_seconds", "0.05", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				var hits atomic.Int64
				backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
				t.Cleanup(backend.Close)
				logs := &records{}
				g, addr, shutdown, done := drainGateway(t, backend.URL, "server: "+server+"\n"+
					"drain_seconds: "+tt.drain+"\nlimits: {retry_after_seconds: 2}\n", logs)
				c, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Session-ID: s1\r\n"+
					"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"model\":")
				require.NoError(t, err)
				// The handler is reading the body: its first buffer is charged.
				require.Eventually(t, func() bool { _, b := g.InFlight(); return b > 0 }, 10*time.Second, time.Millisecond)
				shutdown()
				if tt.endDrain {
					g.EndDrain()
				}
				require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				require.NoError(t, err, "an answer, not a closed connection")
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				_ = resp.Body.Close()
				awaitServe(t, done)

				assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
				assert.True(t, resp.Close, "Connection: close")
				assert.Equal(t, "2", resp.Header.Get("Retry-After"))
				assert.Equal(t, "shutdown", errorCodeOf(t, string(body)))
				assert.Zero(t, hits.Load(), "no backend saw it")
				require.Equal(t, 1, logs.count("request cut by the shutdown drain"))
				attrs := logs.attrsOf("request cut by the shutdown drain")
				assert.Equal(t, int64(http.StatusServiceUnavailable), attrs["status"])
				assert.Equal(t, "request body still arriving", attrs["why"])
				assert.Equal(t, map[string]float64{"5xx/gateway": 1}, requestsByClass(t, g))
			})
		})
	}
}

// attrsOf returns the attributes of the first record with message msg (nil if none).
func (h *records) attrsOf(msg string) map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message == msg {
			out := make(map[string]any)
			r.Attrs(func(a slog.Attr) bool { out[a.Key] = a.Value.Any(); return true })
			return out
		}
	}
	return nil
}
