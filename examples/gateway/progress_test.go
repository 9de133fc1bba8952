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
// backend made no progress on any request while the attempt waited (progress.go): a
// backend that answers others meanwhile is slow for this request, not wedged.
func TestTimeoutCountsOnlyWithoutProgress(t *testing.T) {
	const bound = 600 * time.Millisecond // response_header_seconds and stream_idle_seconds
	tests := []struct {
		name      string
		stream    bool // the waiting requests stall mid-body; else they get no headers
		waiting   int  // requests that wait on the backend at once
		threshold int  // consecutive_connect_failures
		other     bool // another request on the backend completes while they wait
		wantDown  bool
	}{
		{"header timeouts while another request completes: not counted", false, 3, 3, true, false},
		{"header timeouts on a wedged backend: ejected", false, 3, 3, false, true},
		{"a stall while another request completes: not counted", true, 1, 1, true, false},
		{"a stall on a wedged backend: counted", true, 1, 1, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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
				switch r.URL.Path {
				case "/v1/wait":
					if tt.stream {
						w.Header().Set("Content-Type", "text/event-stream")
						_, _ = io.WriteString(w, "c0")
						w.(http.Flusher).Flush()
					}
					arrived <- struct{}{}
					hold(r)
				case "/v1/other":
					// Later than the progress granularity after the stalled stream's own
					// chunk, so its progress is recorded (progress.go).
					select {
					case <-time.After(100 * time.Millisecond):
					case <-release:
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"ok":true}`)
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
			front := httptest.NewServer(g)
			t.Cleanup(front.Close)
			post := func(path string) *http.Response {
				req, err := http.NewRequest(http.MethodPost, front.URL+path, strings.NewReader(`{"model":"m"}`))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(gateway.DefaultTierHeader, "t") // backend a alone
				resp, err := front.Client().Do(req)
				require.NoError(t, err)
				return resp
			}

			var wg sync.WaitGroup
			for range tt.waiting {
				wg.Go(func() {
					resp := post("/v1/wait")
					defer resp.Body.Close()
					body, rerr := io.ReadAll(resp.Body)
					if tt.stream {
						assert.Equal(t, http.StatusOK, resp.StatusCode)
						assert.Error(t, rerr, "the client sees a cut stream")
						assert.Equal(t, "c0", string(body))
					} else {
						assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, "the client still gets its 504")
						assert.Contains(t, string(body), "backend_timeout")
					}
				})
			}
			for range tt.waiting {
				<-arrived
			}
			if tt.other {
				resp := post("/v1/other")
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			}
			wg.Wait()

			if tt.wantDown {
				assert.Equal(t, []string{"a"}, g.PassivelyDown())
			} else {
				assert.Empty(t, g.PassivelyDown(), "slow, not wedged: %s", logs)
				assert.Equal(t, tt.waiting, strings.Count(logs.String(), "not counted"), "each one says why: %s", logs)
			}
			front.Close() // waits for the handlers
			assert.Zero(t, g.Scheduler().Load("a").Requests, "every lease released")
		})
	}
}
