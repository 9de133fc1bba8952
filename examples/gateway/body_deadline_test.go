package gateway_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// The read_body_seconds deadline ends with the body: a response that takes longer than
// it after the upload (a backend thinking, then streaming) is served whole. The gateway
// does not clear the deadline itself: net/http's server does when the body ends. (Were
// the deadline left, the server's background read of the connection would time out and
// cancel the request mid-response.)
func TestReadBodyDeadlineEndsWithTheBody(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		const readBody = 100 * time.Millisecond
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			for i := range 3 {
				select {
				case <-time.After(readBody):
				case <-r.Context().Done():
					return
				}
				if i == 0 {
					w.Header().Set("Content-Type", "text/event-stream")
				}
				_, _ = io.WriteString(w, "data: "+string(rune('1'+i))+"\n\n")
				w.(http.Flusher).Flush()
			}
		}))
		t.Cleanup(backend.Close)
		g, err := gateway.New(gateway.Config{
			Backends: []gateway.BackendConfig{{ID: "a", URL: backend.URL}},
			Health:   gateway.HealthConfig{Enabled: new(false)},
			Timeouts: gateway.TimeoutsConfig{ReadBodySeconds: readBody.Seconds()},
		})
		require.NoError(t, err)
		t.Cleanup(g.Close)
		front := newFront(t, server, g, g.HTTPServer())
		t.Cleanup(front.Close)

		for _, body := range []string{`{"model":"m","stream":true}`, strings.Repeat("x", 200<<10)} {
			req, err := http.NewRequest(http.MethodPost, front.URL+"/v1/files", strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "text/plain") // not parsed: any body is routed
			req.Header.Set("X-Session-ID", "s1")
			resp, err := front.Client().Do(req)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.NoError(t, err, "the response is not cut")
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "data: 1\n\ndata: 2\n\ndata: 3\n\n", string(got))
		}
	})
}

// A request that declares a body it does not send, answered before its body is read (a
// refused method, a bad path, an ops path, a declared length over max_body_bytes), must
// not hold its connection: the server reads (discards) an unread body of up to 256 KiB
// before it sends the answer or closes, and that read had no deadline (the header's was
// cleared, the body's not yet set), so the client got no answer, or no close, and kept a
// connection slot for as long as it liked (tester44). Now read_body_seconds bounds it
// from the handler's start, and a declared length over max_body_bytes is answered at
// once with Connection: close (the direct server closes at once; net/http's reads the
// body after the answer, within the deadline).
func TestUnreadBodyBounded(t *testing.T) {
	cases := []struct {
		name, head string
		readBody   time.Duration // read_body_seconds
		answer     time.Duration // the answer's head arrives before this
		status     string
	}{
		{"declared over max_body_bytes", "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n",
			2 * time.Second, time.Second, "413"},
		{"refused method", "TRACE / HTTP/1.1\r\nHost: g\r\nContent-Length: 5000\r\n\r\n",
			300 * time.Millisecond, 5 * time.Second, "405"},
		{"bad path", "POST /v1/../x HTTP/1.1\r\nHost: g\r\nContent-Length: 5000\r\n\r\n",
			300 * time.Millisecond, 5 * time.Second, "400"},
		{"ops path", "POST /healthz HTTP/1.1\r\nHost: g\r\nContent-Length: 5000\r\n\r\n",
			300 * time.Millisecond, 5 * time.Second, "405"},
	}
	const closed = 5 * time.Second // the connection ends before this
	eachServer(t, func(t *testing.T, server string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				g, err := gateway.New(gateway.Config{
					Backends:     []gateway.BackendConfig{{ID: "a", URL: "http://127.0.0.1:1"}},
					Health:       gateway.HealthConfig{Enabled: new(false)},
					MaxBodyBytes: 1000,
					Timeouts:     gateway.TimeoutsConfig{ReadBodySeconds: tc.readBody.Seconds()},
				})
				require.NoError(t, err)
				t.Cleanup(g.Close)
				front := newFront(t, server, g, g.HTTPServer())
				t.Cleanup(front.Close)
				c, err := net.Dial("tcp", front.Listener.Addr().String())
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				_, err = io.WriteString(c, tc.head+strings.Repeat("x", 100)) // 100 of the 5000 bytes, then silence
				require.NoError(t, err)
				start := time.Now()
				require.NoError(t, c.SetReadDeadline(start.Add(tc.answer)))
				head := make([]byte, 12)
				_, err = io.ReadFull(c, head)
				require.NoError(t, err, "no answer within %v", tc.answer)
				assert.Equal(t, "HTTP/1.1 "+tc.status, string(head))
				require.NoError(t, c.SetReadDeadline(start.Add(closed)))
				_, err = io.ReadAll(c)
				require.NoError(t, err, "the connection still open after %v", closed)
			})
		}
	})
}
