package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A response-header timeout or a stream stall counts toward ejection only when the
// backend made no progress while the attempt waited (progress.go): a backend that
// generates for others meanwhile is slow for this request, not wedged. Only generated
// body bytes are progress: another stream's headers alone, or an answer from a
// non-generation endpoint (/v1/models), do not excuse a wedged engine.
func TestTimeoutCountsOnlyWithoutProgress(t *testing.T) {
	const bound = 600 * time.Millisecond // response_header_seconds and stream_idle_seconds
	tests := []struct {
		name      string
		stream    bool   // the waiting requests stall mid-body; else they get no headers
		waiting   int    // requests that wait on the backend at once
		threshold int    // consecutive_connect_failures
		other     string // what else the backend answers while they wait: "gen" a generation
		// call with its body, "headers" a stream's headers and no byte, "models" GET /v1/models
		wantDown bool
	}{
		{"header timeouts while another request completes: not counted", false, 3, 3, "gen", false},
		{"header timeouts on a wedged backend: ejected", false, 3, 3, "", true},
		{"a stall while another request completes: not counted", true, 1, 1, "gen", false},
		{"a stall on a wedged backend: counted", true, 1, 1, "", true},
		{"header timeouts while /v1/models answers: ejected", false, 3, 3, "models", true},
		{"header timeouts while another stream sends only headers: ejected", false, 3, 3, "headers", true},
		{"a stall while another stream sends only headers: counted", true, 1, 1, "headers", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				release := make(chan struct{})
				arrived := make(chan struct{}, tt.waiting)
				hold := func(r *http.Request) {
					select {
					case <-r.Context().Done():
					case <-release:
					}
				}
				backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					switch r.Header.Get("X-Test-Mode") {
					case "wait":
						if tt.stream {
							w.Header().Set("Content-Type", "text/event-stream")
							_, _ = io.WriteString(w, "c0")
							w.(http.Flusher).Flush()
						}
						arrived <- struct{}{}
						hold(r)
					case "gen", "models":
						// Later than the progress granularity after the stalled stream's own
						// chunk, so its progress would be recorded (progress.go).
						select {
						case <-time.After(100 * time.Millisecond):
						case <-release:
							return
						}
						w.Header().Set("Content-Type", "application/json")
						_, _ = io.WriteString(w, `{"ok":true}`)
					case "headers": // a stream whose engine never generates
						select {
						case <-time.After(100 * time.Millisecond):
						case <-release:
							return
						}
						w.Header().Set("Content-Type", "text/event-stream")
						w.WriteHeader(http.StatusOK)
						w.(http.Flusher).Flush()
						hold(r)
					}
				}))
				t.Cleanup(backend.Close)
				t.Cleanup(func() { close(release) }) // runs before backend.Close
				other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				t.Cleanup(other.Close)
				logger, logs := captureLogs()
				g, err := gateway.New(gateway.Config{
					Backends: []gateway.BackendConfig{{ID: "a", URL: backend.URL, Tier: "t"}, {ID: "b", URL: other.URL}},
					Health:   gateway.HealthConfig{Enabled: new(false)},
					Timeouts: gateway.TimeoutsConfig{
						ResponseHeaderSeconds: bound.Seconds(), StreamIdleSeconds: bound.Seconds(),
					},
					OutlierDetection:    gateway.OutlierConfig{ConsecutiveConnectFailures: tt.threshold},
					RetryOnConnectError: new(false),
				}, gateway.WithLogger(logger))
				require.NoError(t, err)
				t.Cleanup(g.Close)
				front := newFront(t, server, g, nil)
				t.Cleanup(front.Close)
				send := func(method, path, mode string) *http.Response {
					req, err := http.NewRequest(method, front.URL+path, strings.NewReader(`{"model":"m"}`))
					require.NoError(t, err)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Test-Mode", mode)
					req.Header.Set(gateway.DefaultTierHeader, "t") // backend a alone
					resp, err := front.Client().Do(req)
					require.NoError(t, err)
					return resp
				}

				var wg sync.WaitGroup
				for range tt.waiting {
					wg.Go(func() {
						resp := send(http.MethodPost, "/v1/chat/completions", "wait")
						defer resp.Body.Close()
						body, rerr := io.ReadAll(resp.Body)
						if tt.stream {
							assert.Equal(t, http.StatusOK, resp.StatusCode)
							assert.Error(t, rerr, "the client sees a cut stream")
							before, code, _ := splitErrorEvent(t, string(body))
							assert.Equal(t, "c0\n\n", before)
							assert.Equal(t, "backend_timeout", code)
						} else {
							assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, "the client still gets its 504")
							assert.Contains(t, string(body), "backend_timeout")
						}
					})
				}
				for range tt.waiting {
					<-arrived
				}
				switch tt.other {
				case "gen", "models":
					method, path := http.MethodPost, "/v1/chat/completions"
					if tt.other == "models" {
						method, path = http.MethodGet, "/v1/models"
					}
					resp := send(method, path, tt.other)
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					require.NoError(t, err)
					require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
				case "headers":
					wg.Go(func() {
						resp := send(http.MethodPost, "/v1/chat/completions", "headers")
						defer resp.Body.Close()
						_, _ = io.Copy(io.Discard, resp.Body) // cut at the stream-idle bound, or by the backend
					})
				}
				wg.Wait()

				if tt.wantDown {
					assert.Equal(t, []string{"a"}, g.PassivelyDown())
					assert.NotContains(t, logs.String(), "not counted", "nothing excused them")
				} else {
					assert.Empty(t, g.PassivelyDown(), "slow, not wedged: %s", logs)
					assert.Equal(t, tt.waiting, strings.Count(logs.String(), "not counted"), "each one says why: %s", logs)
				}
				front.Close() // waits for the handlers
				assert.Zero(t, g.Scheduler().Load("a").Requests, "every lease released")
			})
		})
	}
}
