package gateway_test

import (
	"io"
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
