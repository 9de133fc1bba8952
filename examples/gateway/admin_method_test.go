package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// The ops paths (/healthz, /readyz, /metrics) are read-only: GET and HEAD are served,
// any other method gets a JSON 405 method_not_allowed with Allow: GET, HEAD, on the
// admin listener and on the main one alike (small2: both answered CONNECT and TRACE
// with 200). Other paths on the admin listener stay a 404 whatever the method.
func TestOpsPathsMethods(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // first registered: runs last
	urls := jsonBackends(t, 1)
	g, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1},
		"health: {enabled: false}\nadmin_listen: 127.0.0.1:0\n"))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); awaitServe(t, done) })
	require.Eventually(t, func() bool { return g.AdminAddr() != nil }, 10*time.Second, time.Millisecond)

	// ask sends one request as written (so CONNECT and lower-case methods go out as
	// they are) and returns the response, its body read.
	ask := func(addr, method, path string) (*http.Response, []byte) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(c, method+" "+path+" HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, body
	}
	listeners := map[string]string{"admin": g.AdminAddr().String(), "main": ln.Addr().String()}
	methods := []struct {
		method string
		want   int
	}{
		{http.MethodGet, http.StatusOK},
		{http.MethodHead, http.StatusOK},
		{http.MethodPost, http.StatusMethodNotAllowed},
		{http.MethodPut, http.StatusMethodNotAllowed},
		{http.MethodPatch, http.StatusMethodNotAllowed},
		{http.MethodDelete, http.StatusMethodNotAllowed},
		{http.MethodOptions, http.StatusMethodNotAllowed},
		{http.MethodConnect, http.StatusMethodNotAllowed},
		{http.MethodTrace, http.StatusMethodNotAllowed},
		{"get", http.StatusMethodNotAllowed}, // methods are case-sensitive (RFC 9110, 9.1)
		{"PURGE", http.StatusMethodNotAllowed},
	}
	for name, addr := range listeners {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			for _, m := range methods {
				t.Run(name+" "+m.method+" "+path, func(t *testing.T) {
					resp, body := ask(addr, m.method, path)
					require.Equal(t, m.want, resp.StatusCode, "%s", body)
					if m.want == http.StatusOK {
						assert.Empty(t, resp.Header.Get("Allow"))
						if m.method == http.MethodHead {
							assert.Empty(t, body)
						}
						return
					}
					assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
					var v struct {
						Error struct{ Code, Message string }
					}
					require.NoError(t, json.Unmarshal(body, &v), "%s", body)
					assert.Equal(t, "method_not_allowed", v.Error.Code)
					assert.Contains(t, v.Error.Message, path)
				})
			}
		}
	}
	// The admin listener proxies nothing: another path is a 404 for any method.
	for _, m := range methods {
		resp, _ := ask(listeners["admin"], m.method, "/v1/models")
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, m.method)
	}
}
