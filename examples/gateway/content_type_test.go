package gateway_test

import (
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A backend response without Content-Type reaches the client without one: the gateway
// adds no field the backend did not send. Both servers would otherwise sniff one from
// the first body bytes (net/http's rule for a handler that sets none, which
// ReverseProxy does not suppress) — "text/plain; charset=utf-8" here, and on a chunked
// response only when its first chunk arrived in time (tester44 saw it come and go).
func TestNoSniffedContentType(t *testing.T) {
	cases := []struct{ name, answer string }{
		{"Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n0\r\n\r\n"},
	}
	eachServer(t, func(t *testing.T, server string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				be, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				t.Cleanup(func() { _ = be.Close() })
				go cannedHTTP(be, []byte(tc.answer))
				g, err := gateway.New(gateway.Config{
					Backends: []gateway.BackendConfig{{ID: "a", URL: "http://" + be.Addr().String()}},
					Health:   gateway.HealthConfig{Enabled: new(false)},
				})
				require.NoError(t, err)
				t.Cleanup(g.Close)
				front := newFront(t, server, g, g.HTTPServer())
				t.Cleanup(front.Close)
				req, err := http.NewRequest(http.MethodGet, front.URL+"/v1/models", nil)
				require.NoError(t, err)
				req.Header.Set("X-Session-ID", "s1")
				resp, err := front.Client().Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, "hello world", string(body))
				_, has := resp.Header["Content-Type"]
				assert.False(t, has, "Content-Type %q added", resp.Header.Get("Content-Type"))
				assert.Equal(t, "a", resp.Header.Get(gateway.HeaderBackend), "proxied")
			})
		}
	})
}
