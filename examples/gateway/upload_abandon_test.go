package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client that abandons its upload — its connection ends (half-closed, closed or reset)
// before the Content-Length or the last chunk it announced — went away before the
// response ended: code_class client_closed (source gateway: no backend saw it). A
// half-closed client still reads its 400. A malformed body, with the client still
// there, stays a 400 bad_body counted as 4xx. (Before: every abandoned upload counted as
// 4xx, source gateway.)
func TestAbandonedUploadIsClientClosed(t *testing.T) {
	const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Session-ID: s1\r\n"
	tests := []struct {
		name      string
		request   string
		end       string // "half-close", "close", "reset", or "" (keep the connection, read the answer)
		wantClass string
		want400   bool // the client reads a 400
	}{
		{"Content-Length short, half-closed", head + "Content-Length: 110\r\n\r\n" + `{"model":"m"}`, "half-close", "client_closed/gateway", true},
		{"Content-Length short, closed", head + "Content-Length: 110\r\n\r\n" + `{"model":"m"}`, "close", "client_closed/gateway", false},
		{"Content-Length short, reset", head + "Content-Length: 110\r\n\r\n" + `{"model":"m"}`, "reset", "client_closed/gateway", false},
		{"chunked without its last chunk, half-closed", head + "Transfer-Encoding: chunked\r\n\r\nd\r\n" + `{"model":"m"}` + "\r\n", "half-close", "client_closed/gateway", true},
		{"malformed chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + `{"model":"m"}` + "\r\n0\r\n\r\n", "", "4xx/gateway", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				g, _ := testGateway(t, "")
				srv := newFront(t, server, g, nil)
				t.Cleanup(srv.Close)
				c, err := net.Dial("tcp", srv.Listener.Addr().String())
				require.NoError(t, err)
				defer c.Close()
				require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
				_, err = io.WriteString(c, tt.request)
				require.NoError(t, err)
				if tt.end != "" { // the gateway is reading the body (its buffer is charged first)
					require.Eventually(t, func() bool { _, b := g.InFlight(); return b > 0 }, 10*time.Second, time.Millisecond)
				}
				switch tt.end {
				case "half-close":
					require.NoError(t, c.(*net.TCPConn).CloseWrite())
				case "close":
					require.NoError(t, c.Close())
				case "reset":
					require.NoError(t, c.(*net.TCPConn).SetLinger(0))
					require.NoError(t, c.Close())
				}
				if tt.want400 {
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					require.NoError(t, err)
					body, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
					assert.Equal(t, "bad_body", errorCodeOf(t, string(body)))
				}
				srv.Close() // waits for the handler
				assert.Equal(t, map[string]float64{tt.wantClass: 1}, requestsByClass(t, g))
			})
		})
	}
}
