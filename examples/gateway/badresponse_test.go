package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A backend that answers generation calls with malformed HTTP — bytes that are not a
// response, headers over 10 MiB, more than 100 1xx responses (direct), a 101 nobody asked
// for, a status outside 100-599 — gets a 502 backend_bad_response from the gateway each
// time and one connection failure for outlier detection: after consecutive_connect_failures (3) in a row it is
// ejected, and the session it held moves to a healthy backend. (Before: never counted,
// so a backend whose /health is 200 kept its sessions and failed every turn.)
func TestMalformedResponsesEjectTheBackend(t *testing.T) {
	bigHeaders := func(c net.Conn) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Pad: " + strings.Repeat("a", 1016) + "\r\n"
		for range 11 << 10 {
			if _, err := io.WriteString(c, line); err != nil {
				return // the gateway gave up
			}
		}
		_, _ = io.WriteString(c, "Content-Length: 2\r\n\r\n{}")
	}
	tests := []struct {
		name    string
		answer  func(c net.Conn)
		clients []string
	}{
		{"not HTTP", func(c net.Conn) {
			_, _ = io.WriteString(c, strings.Repeat("\x00\xffGARBAGE NOT HTTP\r\n\r\n", 10))
		}, []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP}},
		{"malformed header line", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\n{}")
		}, []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP}},
		{"headers over 10 MiB", bigHeaders, []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP}},
		{"more than 100 1xx", func(c net.Conn) {
			for range 101 {
				_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
		}, []string{gateway.BackendClientDirect}}, // nethttp bounds 1xx by header bytes only
		// A status outside 100-599 was forwarded as is (999) and counted client_closed, or
		// (direct, 099) read as a 1xx.
		{"status 999", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 999 Weird\r\nContent-Length: 2\r\n\r\n{}")
		}, []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP}},
		{"status 600", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 600 Past5xx\r\nContent-Length: 2\r\n\r\n{}")
		}, []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP}},
		{"status 099", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\n{}")
		}, []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP}},
		{"101 without an Upgrade request", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nraw bytes")
		}, []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP}},
	}
	for _, tt := range tests {
		for _, client := range tt.clients {
			t.Run(tt.name+"/"+client, func(t *testing.T) {
				bad := requestServer(t, func(c net.Conn, _ *http.Request) { tt.answer(c) })
				good := jsonBackends(t, 2)
				cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf("health: {enabled: false}\nbackend_client: %s\n"+
					"outlier_detection: {consecutive_connect_failures: 3}\nbackends:\n"+
					"  - {id: b0, url: %q}\n  - {id: b1, url: %q}\n  - {id: b2, url: %q}\n", client, bad, good[0], good[1])))
				require.NoError(t, err)
				g, err := gateway.New(cfg)
				require.NoError(t, err)
				t.Cleanup(g.Close)
				session := ""
				for i := 0; session == ""; i++ {
					if s := fmt.Sprintf("s%d", i); hrwBackend(t, s) == "b0" {
						session = s
					}
				}
				srv := httptest.NewServer(g) // a real client: it skips the 1xx the gateway forwards
				t.Cleanup(srv.Close)
				post := func() (int, string, string) {
					req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
					require.NoError(t, err)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Session-ID", session)
					resp, err := srv.Client().Do(req)
					require.NoError(t, err)
					defer resp.Body.Close()
					body, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					return resp.StatusCode, resp.Header.Get(gateway.HeaderBackend), string(body)
				}
				for i := range 3 {
					code, backend, body := post()
					require.Equal(t, http.StatusBadGateway, code, "turn %d: %s", i, body)
					assert.Equal(t, "b0", backend)
					assert.Equal(t, "backend_bad_response", errorCodeOf(t, body))
					if i < 2 {
						assert.Empty(t, g.PassivelyDown(), "after %d malformed responses", i+1)
					}
				}
				assert.Equal(t, []string{"b0"}, g.PassivelyDown(), "three malformed responses in a row eject b0")
				code, backend, body := post()
				require.Equal(t, http.StatusOK, code, body)
				assert.NotEqual(t, "b0", backend, "the session moved")
				srv.Close() // waits for the handlers
				assert.Equal(t, map[string]float64{"5xx/gateway": 3, "2xx/backend": 1}, requestsByClass(t, g))
				for _, id := range []string{"b0", "b1", "b2"} {
					assert.Zero(t, g.Scheduler().Load(id).Requests, "backend %s: lease released", id)
				}
			})
		}
	}
}
