package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

// assertMethodNotAllowed checks the gateway's 405: the usual JSON error body with code
// method_not_allowed, an Allow header without CONNECT or TRACE, no backend named.
func assertMethodNotAllowed(t *testing.T, status int, h http.Header, body []byte) {
	t.Helper()
	require.Equal(t, http.StatusMethodNotAllowed, status, string(body))
	var eb struct {
		Type  string
		Error struct{ Message, Type, Code string }
	}
	require.NoError(t, json.Unmarshal(body, &eb), string(body))
	assert.Equal(t, "error", eb.Type)
	assert.Equal(t, "method_not_allowed", eb.Error.Code)
	assert.Equal(t, "invalid_request_error", eb.Error.Type)
	allow := h.Get("Allow")
	assert.Contains(t, allow, "POST")
	assert.NotContains(t, allow, "CONNECT")
	assert.NotContains(t, allow, "TRACE")
	assert.Equal(t, "application/json", h.Get("Content-Type"))
	assert.Empty(t, h.Get(gateway.HeaderBackend), "refused before a backend is chosen")
}

// CONNECT and TRACE, in any case and any request-target form, are a JSON 405 before
// anything is routed or bound: the backend never sees them (tester33: "CONNECT
// host:port" reached the backend as "CONNECT /prefix/"). Other methods are forwarded.
func TestRefusedMethods(t *testing.T) {
	const refused = ""
	tests := []struct {
		name, method, target string
		session              bool
		want                 string // the path the backend sees; refused: a 405
	}{
		{"CONNECT authority-form", "CONNECT", "127.0.0.1:41001", false, refused},
		{"CONNECT with a session", "CONNECT", "127.0.0.1:41001", true, refused},
		{"CONNECT origin-form", "CONNECT", "/v1/chat/completions", true, refused},
		{"connect, lower case", "connect", "/v1/chat/completions", true, refused},
		{"TRACE", "TRACE", "/v1/models", false, refused},
		{"TRACE with a session", "TRACE", "/v1/chat/completions", true, refused},
		{"Trace, mixed case", "Trace", "/v1/models", false, refused},
		{"TRACE absolute-form", "TRACE", "http://gw.example/v1/models", false, refused},

		{"GET", "GET", "/v1/models", false, "/tenant-a/v1/models"},
		{"OPTIONS", "OPTIONS", "/v1/models", false, "/tenant-a/v1/models"},
		{"DELETE", "DELETE", "/v1/files/x", true, "/tenant-a/v1/files/x"},
		{"extension method", "PROPFIND", "/v1/models", false, "/tenant-a/v1/models"},
		{"CONNECTX is another method", "CONNECTX", "/v1/models", false, "/tenant-a/v1/models"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, pb := newPrefixGateway(t)
			req := httptest.NewRequest(tt.method, tt.target, nil)
			if tt.session {
				req.Header.Set("X-Session-ID", "s1")
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			if tt.want != refused {
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				assert.Equal(t, []string{tt.want}, pb.seen())
				return
			}
			assertMethodNotAllowed(t, rec.Code, rec.Header(), rec.Body.Bytes())
			assert.Empty(t, pb.seen(), "the backend never sees the request")
			assert.Zero(t, g.Scheduler().Len(), "nothing bound")
		})
	}
}

// Through a real listener, where net/http parses "CONNECT host:port" in authority-form:
// CONNECT requests are a 405 and never reach the backend, so a backend that closes the
// connection on them (Node's http server) is not ejected, however many a client sends.
// (Before: each was forwarded as "CONNECT /pre/", the backend closed, and the third one
// ejected it — "outlier detection: 3 consecutive connection failures".)
func TestConnectDoesNotEjectBackend(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		var conns atomic.Int64
		closer := rawServer(t, func(c net.Conn) { conns.Add(1) }) // closes every connection unanswered
		other := rawServer(t, func(c net.Conn) { conns.Add(1) })
		cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf("health: {enabled: false}\n"+
			"outlier_detection: {consecutive_connect_failures: 3}\nbackends:\n"+
			"  - {id: b0, url: %q}\n  - {id: b1, url: %q}\n", closer+"/pre", other+"/pre")))
		require.NoError(t, err)
		g, err := gateway.New(cfg)
		require.NoError(t, err)
		t.Cleanup(g.Close)
		srv := newFront(t, server, g, nil)
		t.Cleanup(srv.Close)

		for i := range 6 {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			require.NoError(t, err)
			require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
			target := "127.0.0.1:41001"
			if i%2 == 1 {
				target = "/v1/chat/completions" // origin-form, with a session: would bind
			}
			_, err = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: 127.0.0.1:41001\r\nX-Session-ID: s%d\r\n\r\n", target, i)
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assertMethodNotAllowed(t, resp.StatusCode, resp.Header, body)
			_ = c.Close()
		}
		assert.Zero(t, conns.Load(), "no backend was contacted")
		hs := g.Scheduler().Health()
		assert.Equal(t, health.Healthy, hs.State("b0"), "not ejected")
		assert.Equal(t, health.Healthy, hs.State("b1"), "not ejected")
		assert.Zero(t, g.Scheduler().Len(), "nothing bound")
	})
}
