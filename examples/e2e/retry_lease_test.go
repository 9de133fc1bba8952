package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// decodeStep is the simulated time per streamed token of the gated backends: a value no
// prefill wait takes, so only the decode steps of a stream wait for the gate.
const decodeStep = time.Hour

// gatedCluster is a gateway over n fakevllm backends whose streams send their headers and
// first chunk at once and then hold every further token until release is called (other
// waits return at once). Nothing sleeps: the held stream is the request in flight.
func gatedCluster(t *testing.T, n int, mutate func(*gateway.Config)) (c *cluster, release func()) {
	t.Helper()
	gate := make(chan struct{})
	sleep := func(ctx context.Context, d time.Duration) error {
		if d != decodeStep {
			return ctx.Err()
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c = &cluster{t: t, backends: map[string]*backendServer{}, recheck: make(chan time.Time)}
	cfg := gateway.Config{}
	for i := range n {
		b := startBackendWith(t, fakevllm.Config{ID: fmt.Sprintf("b%d", i+1), DefaultMaxTokens: 8, DecodePerToken: decodeStep}, sleep)
		c.backends[b.id] = b
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: b.id, URL: b.url})
	}
	if mutate != nil {
		mutate(&cfg)
	}
	var closed bool
	release = func() {
		if !closed {
			closed = true
			close(gate)
		}
	}
	c.start(cfg)
	t.Cleanup(release) // before the cluster's cleanups (they wait for the handlers)
	return c, release
}

// outstanding returns every configured backend's MetricOutstandingRequests from /metrics.
func (c *cluster) outstanding() map[string]float64 {
	c.t.Helper()
	mf := c.metrics()
	out := map[string]float64{}
	for id := range c.backends {
		out[id] = gauge(mf, gateway.MetricOutstandingRequests, map[string]string{"backend": id})
	}
	return out
}

// A retry on another backend moves the request's lease there: while the retried stream is
// in flight the backend serving it has the outstanding request and the failed one has none,
// the response headers describe the serving attempt, and every load is 0 at the end. The
// binding follows the retry rule: it stays after one failure (threshold 3), the session is
// placed again when the failure ejects the backend (threshold 1). (Before the fix the lease
// stayed on the failed backend when it was not ejected: outstanding 1 on the dead backend, 0
// on the serving one, and X-Agent-Serve-Outcome: hit next to Affinity-Hit: false.)
func TestRetryMovesLease(t *testing.T) {
	tests := []struct {
		name      string
		threshold int  // outlier_detection.consecutive_connect_failures
		ejects    bool // the failure ejects the backend: the session is placed again
	}{
		{"one failure, binding stays", 3, false},
		{"failure ejects, session placed again", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, release := gatedCluster(t, 3, func(cfg *gateway.Config) {
				cfg.OutlierDetection.ConsecutiveConnectFailures = tt.threshold
			})
			first := c.chat("r1", []msg{{Role: "user", Content: "hi"}})
			require.Equal(t, http.StatusOK, first.status, "%s", first.body)
			victim := first.backend
			c.killBackend(victim)

			body, err := json.Marshal(map[string]any{"model": "fake-model", "stream": true, "max_tokens": 1000,
				"messages": []msg{{Role: "user", Content: "hi"}, {Role: "user", Content: "a long answer please"}}})
			require.NoError(t, err)
			req, err := http.NewRequest(http.MethodPost, c.url+"/v1/chat/completions", strings.NewReader(string(body)))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-ID", "r1")
			resp, err := c.client.Do(req) // returns with the headers: the stream is held
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			served := resp.Header.Get(gateway.HeaderBackend)
			assert.NotEqual(t, victim, served)
			assert.Equal(t, served, resp.Header.Get("X-Fakevllm-Backend"), "the header names the backend that answered")
			assert.Equal(t, "false", resp.Header.Get(gateway.HeaderAffinityHit))
			assert.Equal(t, "miss", resp.Header.Get(gateway.HeaderOutcome), "the outcome of the attempt that served it")
			_, err = bufio.NewReader(resp.Body).ReadString('\n') // the first chunk arrived
			require.NoError(t, err)

			want := map[string]float64{}
			for id := range c.backends {
				want[id] = 0
			}
			want[served] = 1
			assert.Equal(t, want, c.outstanding(), "during the retried request: the lease is on %s, not on %s", served, victim)
			bound, ok := c.gw.Scheduler().Lookup("r1", "")
			require.True(t, ok)
			mf := c.metrics()
			misses := counter(mf, "agentserve_affinity_misses_total", nil)
			hits := counter(mf, "agentserve_affinity_hits_total", nil)
			if tt.ejects {
				assert.Equal(t, served, bound, "the ejection broke the binding: placed again")
				assert.Equal(t, 2.0, misses, "the first turn, and the retry placed again")
			} else {
				assert.Equal(t, victim, bound, "one failure is not an outage: the binding stays")
				assert.Equal(t, 1.0, misses, "the first turn only: the retry's lease (LeaseBackend) counts nothing")
				assert.Equal(t, 1.0, hits, "the failed attempt's decision")
				assert.Equal(t, 1, c.gw.Scheduler().Len(), "nothing stored for the retry")
			}

			release()
			_, err = io.Copy(io.Discard, resp.Body)
			require.NoError(t, err)
			want[served] = 0
			assert.Equal(t, want, c.outstanding(), "after the stream")
		})
	}
}

// startSessionless sends a streamed chat request without a session, hashed by requestID,
// and returns the response once its headers and first chunk have arrived (a gated
// cluster holds the rest).
func (c *cluster) startSessionless(requestID string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"fake-model","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(gateway.HeaderRequestID, requestID)
	resp, err := c.client.Do(req)
	require.NoError(c.t, err)
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	_, err = bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(c.t, err)
	return resp
}

// A request without a session holds a lease on the backend it is hashed to (load only):
// while it streams that backend's outstanding_requests is 1 and the others' 0; a retry
// moves the lease to the backend that serves it; the response carries no
// X-Agent-Serve-Outcome; nothing is bound or counted as a hit or miss; every load is 0 at
// the end. (Before: outstanding 0 everywhere while it streamed, and the leak test did not
// see such requests.)
func TestSessionlessRequestsAreLeased(t *testing.T) {
	for _, retried := range []bool{false, true} {
		t.Run(fmt.Sprintf("retried=%v", retried), func(t *testing.T) {
			c, release := gatedCluster(t, 3, nil)
			zero := map[string]float64{}
			for id := range c.backends {
				zero[id] = 0
			}
			hashed := c.post("/v1/chat/completions", map[string]string{gateway.HeaderRequestID: "req-7"},
				[]byte(`{"model":"fake-model","max_tokens":8,"messages":[{"role":"user","content":"x"}]}`)) // not gated (8 decode steps take 8h at once)
			require.Equal(t, http.StatusOK, hashed.status, "%s", hashed.body)
			assert.Equal(t, zero, c.outstanding(), "the finished request released its lease")
			if retried {
				c.killBackend(hashed.backend) // the next attempt is refused there and retried
			}

			resp := c.startSessionless("req-7")
			defer resp.Body.Close()
			served := resp.Header.Get(gateway.HeaderBackend)
			if retried {
				assert.NotEqual(t, hashed.backend, served, "retried on another backend")
			} else {
				assert.Equal(t, hashed.backend, served, "the same key hashes to the same backend")
			}
			assert.Empty(t, resp.Header.Values(gateway.HeaderOutcome), "no outcome without a session")
			assert.Equal(t, "false", resp.Header.Get(gateway.HeaderAffinityHit))
			want := maps.Clone(zero)
			want[served] = 1
			assert.Equal(t, want, c.outstanding(), "in flight: leased on %s only", served)

			release()
			_, err := io.Copy(io.Discard, resp.Body)
			require.NoError(t, err)
			assert.Equal(t, zero, c.outstanding(), "after the stream")
			assert.Zero(t, c.gw.Scheduler().Len(), "nothing bound")
			mf := c.metrics()
			assert.Zero(t, counter(mf, "agentserve_affinity_hits_total", nil)+counter(mf, "agentserve_affinity_misses_total", nil))
		})
	}
}
