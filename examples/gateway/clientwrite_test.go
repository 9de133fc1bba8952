package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// metricLine returns the /metrics line of the gateway that starts with prefix ("" if none).
func metricLine(g *gateway.Gateway, prefix string) string {
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// A client that stops reading a response (its write blocks) loses it after
// timeouts.client_write_seconds: its request slot and backend lease are released, the
// backend's request ends, an Info line is logged and it counts as client_closed (before:
// held for as long as the client kept its socket open, a slot per connection). A client
// that keeps reading a stream lasting several times the bound is not cut: the deadline is
// renewed by the writes.
func TestClientWriteBound(t *testing.T) {
	const bound = 0.3 // seconds
	for _, client := range []string{"direct", "nethttp"} {
		t.Run(client, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				var ended atomic.Int64 // backend requests whose context ended
				backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer ended.Add(1)
					w.Header().Set("Content-Type", "text/event-stream")
					rc := http.NewResponseController(w)
					if r.URL.Query().Has("slow") { // 30 small events over ~1.2 s: 4x the bound
						pace := time.NewTicker(40 * time.Millisecond) // the backend's pace
						defer pace.Stop()
						for i := range 30 {
							fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
							_ = rc.Flush()
							<-pace.C
						}
						_, _ = io.WriteString(w, "data: [DONE]\n\n")
						return
					}
					event := "data: " + strings.Repeat("x", 16<<10) + "\n\n"
					for range 4096 { // at most 64 MiB: far beyond any socket buffer
						if _, err := io.WriteString(w, event); err != nil || rc.Flush() != nil {
							return
						}
					}
				}))
				t.Cleanup(backend.Close)
				logger, logs := captureLogs()
				cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf("health: {enabled: false}\nbackend_client: %s\n"+
					"timeouts: {client_write_seconds: %v}\nbackends:\n  - {id: b0, url: %q}\n", client, bound, backend.URL)))
				require.NoError(t, err)
				g, err := gateway.New(cfg, gateway.WithLogger(logger))
				require.NoError(t, err)
				t.Cleanup(g.Close)
				srv := newFront(t, server, g, nil)
				t.Cleanup(srv.Close)

				// A reading client gets the whole slow stream.
				req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions?slow",
					strings.NewReader(`{"model":"m","stream":true}`))
				require.NoError(t, err)
				req.Header.Set("X-Session-ID", "reader")
				resp, err := srv.Client().Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err, "a client that reads is never cut")
				assert.Contains(t, string(body), "data: [DONE]")
				assert.NotContains(t, logs.String(), "client stopped reading")

				// A client that never reads.
				c, err := net.Dial("tcp", srv.Listener.Addr().String())
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				const reqBody = `{"model":"m","stream":true}`
				_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Session-ID: stuck\r\n"+
					"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(reqBody), reqBody)
				require.NoError(t, err)
				before := ended.Load()
				require.Eventually(t, func() bool {
					return strings.Contains(logs.String(), "client stopped reading") && ended.Load() > before
				}, 10*time.Second, 20*time.Millisecond, "the stalled client's response is aborted and the backend request ends")
				assert.Equal(t, "agentserve_gateway_inflight_requests 0", metricLine(g, "agentserve_gateway_inflight_requests "))
				assert.Contains(t, metricLine(g, `agentserve_gateway_requests_total{code_class="client_closed",source="backend"}`), "} 1")
				assert.Contains(t, logs.String(), `"client_write_seconds":0.3`)

				// The connection was closed by the gateway: reading what it buffered ends in EOF.
				require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
				_, err = io.Copy(io.Discard, bufio.NewReader(c))
				assert.NoError(t, err, "the gateway closed the connection")
			})
		})
	}
}

// A 103 Early Hints that a backend sends later than client_write_seconds after the
// request started reaches a client that reads, followed by the answer: net/http writes
// an interim response at once, so the gateway renews the write deadline for it too
// (before: written under the request's first deadline, already past, and the client got
// an empty reply).
func TestClientWriteBoundLateInterim(t *testing.T) {
	const bound = 300 * time.Millisecond
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		t.Run(client, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				url := requestServer(t, func(c net.Conn, _ *http.Request) {
					<-time.After(2 * bound) // the backend's pace
					_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
						"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}")
				})
				srv := serveGatewayOn(t, server, client, url, fmt.Sprintf("timeouts: {client_write_seconds: %v}\n", bound.Seconds()))
				c, err := net.Dial("tcp", srv.Listener.Addr().String())
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
				_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Session-ID: s1\r\n"+
					"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(chatBody), chatBody)
				require.NoError(t, err)
				all, err := io.ReadAll(c)
				require.NoError(t, err)
				assert.Contains(t, string(all), " 103 Early Hints\r\n")
				assert.Contains(t, string(all), " 200 OK\r\n")
				assert.Contains(t, string(all), `"ok":true`)
			})
		})
	}
}
