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

// The response-header and stream-idle bounds share one timer per attempt that ticks at
// the smaller of the two (timeouts.go, attemptTimer): each bound must still fire when,
// and only when, it is exceeded, whichever of the two is smaller.
func TestAttemptBoundsShareOneTimer(t *testing.T) {
	const tick = 40 * time.Millisecond
	type script struct {
		headerDelay time.Duration   // before the response headers
		chunkGaps   []time.Duration // before each body chunk
	}
	tests := []struct {
		name       string
		hdr, idle  time.Duration
		backend    script
		wantStatus int
		wantBody   string // "" with wantCut
		wantCut    bool   // the body ends early (stream cut)
		wantDown   bool   // counted as a connection failure (ejects at threshold 1)
	}{
		{"headers later than stream_idle, within response_header: served",
			10 * tick, tick, script{headerDelay: 4 * tick, chunkGaps: []time.Duration{0}}, 200, "c0", false, false},
		{"no headers within response_header although the timer ticks at stream_idle: 504",
			4 * tick, tick, script{headerDelay: time.Hour}, 504, "", false, true},
		{"chunks each within stream_idle for longer than response_header: served",
			2 * tick, 2 * tick, script{chunkGaps: []time.Duration{0, tick, tick, tick, tick, tick}}, 200, "c0c1c2c3c4c5", false, false},
		{"a stall longer than stream_idle mid-body: cut",
			20 * tick, 2 * tick, script{chunkGaps: []time.Duration{0, 8 * tick, 0}}, 200, "", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				release := make(chan struct{})
				backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					wait := func(d time.Duration) bool {
						select {
						case <-time.After(d):
							return true
						case <-r.Context().Done():
							return false
						case <-release:
							return false
						}
					}
					if !wait(tt.backend.headerDelay) {
						return
					}
					w.Header().Set("Content-Type", "text/event-stream")
					w.WriteHeader(http.StatusOK)
					w.(http.Flusher).Flush()
					for i, gap := range tt.backend.chunkGaps {
						if !wait(gap) {
							return
						}
						_, _ = io.WriteString(w, "c"+string(rune('0'+i)))
						w.(http.Flusher).Flush()
					}
				}))
				t.Cleanup(backend.Close)
				t.Cleanup(func() { close(release) }) // runs before backend.Close
				g, err := gateway.New(gateway.Config{
					Backends: []gateway.BackendConfig{{ID: "a", URL: backend.URL}, {ID: "b", URL: backend.URL}},
					Health:   gateway.HealthConfig{Enabled: new(false)},
					Timeouts: gateway.TimeoutsConfig{
						ResponseHeaderSeconds: tt.hdr.Seconds(), StreamIdleSeconds: tt.idle.Seconds(),
					},
					OutlierDetection:    gateway.OutlierConfig{ConsecutiveConnectFailures: 1},
					RetryOnConnectError: new(false),
				})
				require.NoError(t, err)
				t.Cleanup(g.Close)
				front := newFront(t, server, g, nil)
				t.Cleanup(front.Close)

				req, err := http.NewRequest(http.MethodPost, front.URL+"/v1/chat/completions",
					strings.NewReader(`{"model":"m","stream":true}`))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-ID", "s1")
				start := time.Now()
				resp, err := front.Client().Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				body, rerr := io.ReadAll(resp.Body)
				assert.Equal(t, tt.wantStatus, resp.StatusCode, string(body))
				switch {
				case tt.wantCut:
					assert.Error(t, rerr, "the client sees a cut stream")
					before, code, _ := splitErrorEvent(t, string(body))
					assert.Equal(t, "c0\n\n", before, "what came before the stall, its open event ended")
					assert.Equal(t, "backend_timeout", code)
				case tt.wantStatus == 200:
					require.NoError(t, rerr)
					assert.Equal(t, tt.wantBody, string(body))
				default:
					assert.Contains(t, string(body), "backend_timeout")
					assert.GreaterOrEqual(t, time.Since(start), tt.hdr, "not before response_header_seconds")
				}
				if tt.wantDown {
					assert.Len(t, g.PassivelyDown(), 1, "one connection failure ejects (threshold 1)")
				} else {
					assert.Empty(t, g.PassivelyDown())
				}
				front.Close() // waits for the handler
				switch {
				case tt.wantCut:
					assert.Equal(t, map[string]float64{"backend_closed/backend": 1}, requestsByClass(t, g), "a stream cut for a stall")
				case tt.wantStatus == 200:
					assert.Equal(t, map[string]float64{"2xx/backend": 1}, requestsByClass(t, g))
				}
			})
		})
	}
}
