package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// modeServer is a backend that answers each request as its "mode" query parameter says:
// cut (an SSE 200 cut after its first chunk), stream (an SSE 200 that sends one chunk and
// then waits until the gateway closes the connection), ok (a whole JSON 200), 204, and
// any HEAD a 200 with a Content-Length and no body. One request per connection.
func modeServer(t *testing.T) string {
	t.Helper()
	const sse = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\na\r\ndata: {}\n\n\r\n"
	return requestServer(t, func(c net.Conn, req *http.Request) {
		switch mode := req.URL.Query().Get("mode"); {
		case req.Method == http.MethodHead:
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n")
		case mode == "cut":
			_, _ = io.WriteString(c, sse)
		case mode == "stream":
			_, _ = io.WriteString(c, sse)
			_, _ = io.Copy(io.Discard, c) // until the gateway closes the connection
		case mode == "ok":
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
		case mode == "204":
			_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
		}
	})
}

// Only a response served to its end resets a backend's failure streaks. A stream the
// client drops before its end counts neither way, so cut, cut, <a stream the client
// cancels>, cut is three cuts in a row and ejects the backend
// (consecutive_connect_failures 3). A whole response, a HEAD and a 204 (bodiless: the
// proxy may close them unread) still reset the streak. (Before: the dropped stream's
// Close counted as a success and reset the streak, so a client cancelling streams kept
// a backend that cuts the others in service.)
func TestClientCancelDoesNotResetStreak(t *testing.T) {
	tests := []struct {
		middle    string // the third request: a mode, "HEAD", or "cancel" (a stream dropped by the client)
		wantEject bool
	}{
		{"cancel", true},
		{"ok", false},
		{"HEAD", false},
		{"204", false},
	}
	for _, tt := range tests {
		for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
			t.Run(client+"/"+tt.middle, func(t *testing.T) {
				eachServer(t, func(t *testing.T, server string) {
					cfg := gateway.Config{
						BackendClient: client,
						Backends: []gateway.BackendConfig{
							{ID: "b0", URL: modeServer(t)},
							{ID: "b1", URL: modeServer(t)},
						},
						Health:              gateway.HealthConfig{Enabled: new(false)},
						OutlierDetection:    gateway.OutlierConfig{ConsecutiveConnectFailures: 3},
						RetryOnConnectError: new(false),
					}
					g, err := gateway.New(cfg)
					require.NoError(t, err)
					t.Cleanup(g.Close)
					ts := newFront(t, server, g, nil)
					t.Cleanup(ts.Close)

					send := func(step string) {
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						method, mode := http.MethodPost, step
						switch step {
						case "HEAD":
							method = http.MethodHead
						case "cancel":
							mode = "stream"
						}
						req, err := http.NewRequestWithContext(ctx, method, ts.URL+"/v1/chat/completions?mode="+mode,
							strings.NewReader(`{"model":"m","stream":true}`))
						require.NoError(t, err)
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("X-Session-ID", "s1")
						resp, err := ts.Client().Do(req)
						require.NoError(t, err, step)
						if step == "cancel" {
							buf := make([]byte, len("data: {}\n\n"))
							_, err = io.ReadFull(resp.Body, buf)
							require.NoError(t, err, "the stream's first event arrives")
							cancel() // the client goes away mid-stream
						} else {
							_, _ = io.Copy(io.Discard, resp.Body)
						}
						_ = resp.Body.Close()
						for _, id := range []string{"b0", "b1"} { // the attempt's outcome is recorded by then
							require.Eventually(t, func() bool { return g.Scheduler().Load(id).Requests == 0 },
								10*time.Second, time.Millisecond, "backend %s: lease released after %s", id, step)
						}
					}
					for _, step := range []string{"cut", "cut", tt.middle} {
						send(step)
						assert.Empty(t, g.PassivelyDown(), "after %s", step)
					}
					send("cut")
					if tt.wantEject {
						assert.Len(t, g.PassivelyDown(), 1, "three cuts in a row, the dropped stream between them not counted")
					} else {
						assert.Empty(t, g.PassivelyDown(), "the %s response reset the streak", tt.middle)
					}
				})
			})
		}
	}
}
