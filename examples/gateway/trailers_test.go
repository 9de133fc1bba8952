package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A backend's X-Agent-Serve-* trailers never reach the client, declared or not, on JSON
// and event-stream responses, with both backend clients; its other trailers do.
// (tester33: a forged X-Agent-Serve-Backend trailer reached the client, and a backend
// declaring "Trailer: X-Agent-Serve-Outcome" made the gateway send its own Outcome
// again as a trailer.)
func TestOwnTrailersRemoved(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", q.Get("type"))
		if q.Has("declared") {
			w.Header().Set("Trailer", "X-Agent-Serve-Outcome, X-T1")
			w.Header().Add("Trailer", "x-agent-serve-backend")
		}
		body := `{"id":"cmpl","choices":[]}`
		if q.Get("type") == "text/event-stream" {
			body = "data: {}\n\ndata: [DONE]\n\n"
		}
		_, _ = io.WriteString(w, body)
		w.(http.Flusher).Flush() // chunked
		if q.Has("declared") {
			w.Header().Set("X-Agent-Serve-Outcome", "forged")
			w.Header().Set("X-Agent-Serve-Backend", "forged")
			w.Header().Set("X-T1", "v1")
			return
		}
		w.Header().Set(http.TrailerPrefix+"X-Agent-Serve-Backend", "trailer-forged")
		w.Header().Set(http.TrailerPrefix+"X-Agent-Serve-Outcome", "trailer-forged")
		w.Header().Set(http.TrailerPrefix+"X-T1", "v1")
	}))
	t.Cleanup(be.Close)
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		for _, tc := range []struct{ name, query string }{
			{"json declared", "declared&type=application/json"},
			{"json undeclared", "type=application/json"},
			{"sse declared", "declared&type=text/event-stream"},
			{"sse undeclared", "type=text/event-stream"},
		} {
			t.Run(client+" "+tc.name, func(t *testing.T) {
				eachServer(t, func(t *testing.T, server string) {
					srv := serveGatewayOn(t, server, client, be.URL)
					resp := postChat(t, srv, "?"+tc.query)
					defer resp.Body.Close()
					declared := slices.Sorted(func(yield func(string) bool) {
						for k := range resp.Trailer {
							if !yield(k) {
								return
							}
						}
					})
					_, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					for k := range resp.Trailer {
						assert.False(t, strings.HasPrefix(strings.ToLower(k), "x-agent-serve-"), "trailer %s: %q", k, resp.Trailer[k])
					}
					for _, k := range declared {
						assert.False(t, strings.HasPrefix(strings.ToLower(k), "x-agent-serve-"), "declared trailer %s", k)
					}
					assert.Equal(t, "v1", resp.Trailer.Get("X-T1"), "the other trailer arrives")
					assert.Equal(t, "b0", resp.Header.Get(gateway.HeaderBackend))
					assert.Equal(t, []string{"miss"}, resp.Header.Values(gateway.HeaderOutcome), "the gateway's own, once")
				})
			})
		}
	}
}
