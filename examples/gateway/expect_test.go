package gateway_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// TestExpectContinueOnce sends "Expect: 100-continue" over a raw connection, waits for
// the 100 before sending the body (as curl does), and checks that exactly one
// "100 Continue" reaches the client: the gateway's own, sent when it reads the body. The
// backend (a net/http server, which answers an Expect with its own 100) must not be
// asked for one, so none is relayed, with either backend client.
func TestExpectContinueOnce(t *testing.T) {
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		t.Run(client, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				var mu sync.Mutex
				var expects []string
				be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.ReadAll(r.Body) // a net/http server sends 100 Continue here if asked
					mu.Lock()
					expects = append(expects, r.Header.Get("Expect"))
					mu.Unlock()
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"ok":true}`)
				}))
				t.Cleanup(be.Close)
				c := dialGatewayOn(t, server, client, be.URL)
				body := `{"model":"m","messages":[]}`
				_, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Session-ID: s1\r\n"+
					"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n")
				require.NoError(t, err)
				br := bufio.NewReader(c)
				first, err := br.ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, "HTTP/1.1 100 Continue\r\n", first, "the gateway asks for the body")
				_, err = io.WriteString(c, body)
				require.NoError(t, err)
				rest, err := io.ReadAll(br) // Connection: close: the gateway closes after the response
				require.NoError(t, err)
				all := first + string(rest)

				assert.Equal(t, 1, strings.Count(all, " 100 Continue\r\n"), "response:\n%s", all)
				assert.Contains(t, all, "HTTP/1.1 200 OK\r\n")
				assert.Contains(t, all, `"ok":true`)
				mu.Lock()
				defer mu.Unlock()
				assert.Equal(t, []string{""}, expects, "Expect forwarded to the backend")
			})
		})
	}
}
