package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// forgingBackend answers with its own X-Agent-Serve-* response headers (any case), in
// the content type and status the request's path asks for, and reports the request
// headers it got on seen.
func forgingBackend(t *testing.T, seen chan<- http.Header) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case seen <- r.Header.Clone():
		default:
		}
		h := w.Header()
		h.Set("X-Agent-Serve-Outcome", "forged")
		h["x-agent-serve-backend"] = []string{"forged"} // not canonical: written as is
		h.Set("X-Agent-Serve-Affinity-Hit", "forged")
		h.Set("X-Agent-Serve-Anything", "forged")
		h.Set("X-Agent-Served", "kept") // another name: not the gateway's prefix
		switch {
		case strings.HasSuffix(r.URL.Path, "/stream"):
			h.Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {}\n\ndata: [DONE]\n\n")
		case strings.HasSuffix(r.URL.Path, "/fail"):
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"message":"boom"}}`)
		case strings.HasSuffix(r.URL.Path, "/nope"):
			http.NotFound(w, r)
		default:
			h.Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A backend's own X-Agent-Serve-* response headers never reach the client: the gateway
// removes them all, then sets its own (tester32: X-Agent-Serve-Outcome: forged reached
// clients of requests the gateway sets no outcome on). Every response path: JSON, SSE,
// an error passed through, a 404, GET /v1/models, with and without a session, both
// backend clients.
func TestBackendOwnHeadersStripped(t *testing.T) {
	tests := []struct {
		name, method, path string
		session            bool
		wantOutcome        []string
	}{
		{"json with session", "POST", "/v1/chat/completions", true, []string{"miss"}},
		{"json without session", "POST", "/v1/chat/completions", false, nil},
		{"models with session", "GET", "/v1/models", true, nil},
		{"models without session", "GET", "/v1/models", false, nil},
		{"event stream", "POST", "/v1/chat/completions/stream", true, nil},
		{"error passed through", "POST", "/v1/fail", false, nil},
		{"404", "POST", "/v1/nope", true, nil},
	}
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		for _, tt := range tests {
			t.Run(client+"/"+tt.name, func(t *testing.T) {
				eachServer(t, func(t *testing.T, server string) {
					srv := serveGatewayOn(t, server, client, forgingBackend(t, nil), "inject_metadata: false\n")
					var body io.Reader
					if tt.method == "POST" {
						body = strings.NewReader(chatBody)
					}
					req, err := http.NewRequest(tt.method, srv.URL+tt.path, body)
					require.NoError(t, err)
					if tt.session {
						req.Header.Set("X-Session-ID", "s1")
					}
					resp, err := srv.Client().Do(req)
					require.NoError(t, err)
					_, _ = io.Copy(io.Discard, resp.Body)
					require.NoError(t, resp.Body.Close())

					for k, v := range resp.Header {
						if !strings.HasPrefix(k, "X-Agent-Serve-") {
							continue
						}
						assert.NotContains(t, v, "forged", "%s", k)
					}
					assert.Equal(t, []string{"b0"}, resp.Header[gateway.HeaderBackend])
					assert.Equal(t, []string{"false"}, resp.Header[gateway.HeaderAffinityHit])
					assert.Equal(t, tt.wantOutcome, resp.Header[gateway.HeaderOutcome])
					assert.NotContains(t, resp.Header, "X-Agent-Serve-Anything")
					assert.Equal(t, []string{"kept"}, resp.Header["X-Agent-Served"])
				})
			})
		}
	}
}

// The gateway's X-Agent-Serve-* names are stripped from a 103 Early Hints it relays
// too, and from a 101's header (which carries the gateway's own).
func TestBackendOwnHeadersStrippedInformational(t *testing.T) {
	t.Run("103", func(t *testing.T) {
		eachServer(t, func(t *testing.T, server string) {
			backend := requestServer(t, func(c net.Conn, _ *http.Request) {
				_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nX-Agent-Serve-Outcome: forged\r\n\r\n"+
					"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}")
			})
			c := dialGatewayOn(t, server, gateway.BackendClientDirect, backend)
			_, err := io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
			require.NoError(t, err)
			all, err := io.ReadAll(c)
			require.NoError(t, err)
			assert.Contains(t, string(all), " 103 Early Hints\r\n")
			assert.Contains(t, string(all), "Link: </a.css>")
			assert.NotContains(t, string(all), "forged")
		})
	})
	t.Run("101", func(t *testing.T) {
		eachServer(t, func(t *testing.T, server string) {
			backend := rawServer(t, func(c net.Conn) {
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\nX-Agent-Serve-Outcome: forged\r\n\r\n")
			})
			c := dialGatewayOn(t, server, gateway.BackendClientDirect, backend)
			_, err := io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: gw\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			require.NoError(t, err)
			tp := textproto.NewReader(bufio.NewReader(c))
			line, err := tp.ReadLine()
			require.NoError(t, err)
			require.Contains(t, line, " 101 ")
			h, err := tp.ReadMIMEHeader()
			require.NoError(t, err)
			assert.Empty(t, h.Values(gateway.HeaderOutcome))
			assert.Equal(t, []string{"b0"}, h.Values(gateway.HeaderBackend))
		})
	})
}

// Client-sent X-Agent-Serve-* request headers reach the backend only when the gateway
// reads them as input (the tier header, here the default X-Agent-Serve-Tier); the others
// are dropped: the prefix is the gateway's.
func TestClientOwnHeadersStripped(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		seen := make(chan http.Header, 1)
		srv := serveGatewayOn(t, server, gateway.BackendClientDirect, forgingBackend(t, seen))
		req, err := http.NewRequestWithContext(context.Background(), "POST", srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		require.NoError(t, err)
		req.Header.Set("X-Session-ID", "s1")
		req.Header.Set("X-Agent-Serve-Tier", "default")
		req.Header.Set("X-Agent-Serve-Backend", "forged")
		req.Header.Set("X-Agent-Serve-Outcome", "forged")
		req.Header.Set("X-Agent-Serve-Whatever", "forged")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		h := <-seen
		assert.Equal(t, "default", h.Get("X-Agent-Serve-Tier"), "an input header passes")
		assert.Equal(t, "s1", h.Get("X-Session-ID"))
		for _, k := range []string{"X-Agent-Serve-Backend", "X-Agent-Serve-Outcome", "X-Agent-Serve-Whatever"} {
			assert.NotContains(t, h, k)
		}
	})
}

// An HTTP/1.0 request without Host sends the backend no X-Forwarded-Host (it sent an
// empty one: tester32).
func TestForwardedHostOmittedWhenEmpty(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		seen := make(chan http.Header, 1)
		c := dialGatewayOn(t, server, gateway.BackendClientDirect, forgingBackend(t, seen))
		_, err := io.WriteString(c, "GET /v1/models HTTP/1.0\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		h := <-seen
		assert.NotContains(t, h, "X-Forwarded-Host")
		assert.Equal(t, []string{"127.0.0.1"}, h["X-Forwarded-For"])
	})
}
