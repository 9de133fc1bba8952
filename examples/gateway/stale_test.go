package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// earlyHintsThenCloseServer is a backend (id) that answers the first request on each
// connection with a 200 and keeps the connection open, and every later request on it
// with a 103 Early Hints, then closes it without a final response.
func earlyHintsThenCloseServer(t *testing.T, id string) string {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for n := 0; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if n > 0 {
				_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </fail>\r\n\r\n")
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-From: "+id+"\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
		}
	})
}

// A reused keep-alive connection that sent a 1xx for this request and then closed was
// alive: its failure is the backend's, not the keep-alive race. The request is not
// replayed on the same backend (which sent the 103 a second time), the failure counts
// for outlier detection, and the retry goes to the other backend, with both backend
// clients. (Before: backend_client direct replayed it on the same backend, uncounted,
// and the client got the 103 twice.)
func TestRespondedConnIsNotStale(t *testing.T) {
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		t.Run(client, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				cfg, err := gateway.ParseConfig([]byte("health: {enabled: false}\nbackend_client: " + client +
					"\noutlier_detection: {consecutive_connect_failures: 1}\nbackends:\n" +
					"  - {id: b0, url: \"" + earlyHintsThenCloseServer(t, "b0") + "\"}\n" +
					"  - {id: b1, url: \"" + earlyHintsThenCloseServer(t, "b1") + "\"}\n"))
				require.NoError(t, err)
				g, err := gateway.New(cfg)
				require.NoError(t, err)
				t.Cleanup(g.Close)
				srv := newFront(t, server, g, nil)
				t.Cleanup(srv.Close)

				get := func() (from string, hints int) {
					trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
						if code == http.StatusEarlyHints {
							hints++
						}
						return nil
					}}
					req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, srv.URL+"/v1/models", nil)
					require.NoError(t, err)
					req.Header.Set("X-Session-ID", "s1")
					resp, err := srv.Client().Do(req)
					require.NoError(t, err)
					defer resp.Body.Close()
					_, _ = io.Copy(io.Discard, resp.Body)
					require.Equal(t, http.StatusOK, resp.StatusCode)
					return resp.Header.Get("X-From"), hints
				}
				bound, hints := get() // leaves an idle connection to the bound backend
				require.NotEmpty(t, bound)
				assert.Zero(t, hints)
				from, hints := get() // that connection sends a 103 and closes
				assert.NotEqual(t, bound, from, "not replayed on the backend that answered")
				assert.Equal(t, 1, hints, "the failed attempt's 103 reaches the client once")
				assert.Equal(t, []string{bound}, g.PassivelyDown(), "the failure counts")
			})
		})
	}
}

// A request replayed after a stale keep-alive connection (here a POST with an
// Idempotency-Key, written before the backend closed the connection) carries its whole
// body again, with both backend clients. (The direct client's requests carry no
// GetBody: the retry reads the body from the request's route.)
func TestStaleRetryReplaysBody(t *testing.T) {
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		t.Run(client, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				bodies := make(chan string, 8)
				url := rawServer(t, func(c net.Conn) {
					br := bufio.NewReader(c)
					for n := 0; ; n++ {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						b, _ := io.ReadAll(req.Body)
						bodies <- string(b)
						if n > 0 {
							return // the second request on a connection: closed unanswered
						}
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
					}
				})
				srv := serveGatewayOn(t, server, client, url)
				post := func(body string) int {
					req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
					require.NoError(t, err)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Session-ID", "s1")
					req.Header.Set("Idempotency-Key", "k1")
					resp, err := srv.Client().Do(req)
					require.NoError(t, err)
					defer resp.Body.Close()
					_, _ = io.Copy(io.Discard, resp.Body)
					return resp.StatusCode
				}
				first, second := `{"model":"m","n":1}`, `{"model":"m","n":2,"messages":[]}`
				require.Equal(t, http.StatusOK, post(first))
				require.Equal(t, http.StatusOK, post(second)) // stale connection, then a fresh one
				require.Len(t, bodies, 3)
				assert.Equal(t, first, <-bodies)
				assert.Equal(t, second, <-bodies, "the attempt on the stale connection")
				assert.Equal(t, second, <-bodies, "the replay")
			})
		})
	}
}
