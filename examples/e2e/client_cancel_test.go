package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// startChat sends a chat request of session under ctx and returns the response once its
// headers and, for a stream, its first chunk have arrived.
func (c *cluster) startChat(ctx context.Context, session string, stream bool, maxTokens int) *http.Response {
	c.t.Helper()
	body, err := json.Marshal(map[string]any{"model": "fake-model", "stream": stream, "max_tokens": maxTokens,
		"messages": []msg{{Role: "user", Content: "hi"}}})
	require.NoError(c.t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/chat/completions", strings.NewReader(string(body)))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	resp, err := c.client.Do(req)
	require.NoError(c.t, err)
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	if stream {
		_, err = bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(c.t, err)
	}
	return resp
}

// requestsTotal returns MetricRequests by code_class (source backend), read from the registry.
func (c *cluster) requestsTotal() map[string]float64 {
	c.t.Helper()
	mfs, err := c.gw.Registry().Gather()
	require.NoError(c.t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != gateway.MetricRequests {
			continue
		}
		for _, m := range mf.GetMetric() {
			var class, source string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "code_class":
					class = lp.GetValue()
				case "source":
					source = lp.GetValue()
				}
			}
			if source == "backend" && m.GetCounter().GetValue() > 0 {
				out[class] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// A client that goes away is not a backend failure: five streams cancelled after their 200
// headers and first chunk, and one non-stream request cancelled while its backend
// generates, log nothing above Debug (before: one WARN "httputil: ReverseProxy read error
// during body copy: unexpected EOF" per stream, naming no backend), count as client_closed
// all six (before: the streams as 2xx), and count no failure for outlier detection (one
// would eject here).
func TestClientCancelIsNotABackendFailure(t *testing.T) {
	c, _ := gatedCluster(t, 2, func(cfg *gateway.Config) {
		cfg.OutlierDetection.ConsecutiveConnectFailures = 1
	})
	for i := range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		resp := c.startChat(ctx, fmt.Sprintf("s%d", i), true, 20000)
		cancel()
		_ = resp.Body.Close()
	}

	// A non-stream request with max_tokens 1 waits one gated decode step: cancelled once
	// its backend has it (the sixth request the backends accepted).
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"fake-model","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		if !assert.NoError(t, err) {
			return
		}
		req.Header.Set("X-Session-ID", "json")
		_, err = c.client.Do(req)
		assert.ErrorIs(t, err, context.Canceled)
	})
	require.Eventually(t, func() bool {
		var n uint64
		for _, b := range c.backends {
			n += b.sim.Stats().Requests
		}
		return n == 6
	}, 5*time.Second, time.Millisecond, "the non-stream request reached its backend")
	cancel()
	wg.Wait()
	c.ts.Close() // waits for every handler

	assert.Empty(t, c.records.atLeast(slog.LevelInfo), "nothing logged above Debug")
	assert.Equal(t, map[string]float64{"client_closed": 6}, c.requestsTotal())
	assert.Empty(t, c.gw.PassivelyDown(), "no failure counted")
}

// A backend that dies mid-stream is a backend failure: one WARN naming the backend, the
// client sees its stream cut, and the request counts as code_class backend_closed (before:
// 2xx, as if it had been served).
func TestBackendDeathMidStreamWarns(t *testing.T) {
	c, _ := gatedCluster(t, 2, nil)
	resp := c.startChat(context.Background(), "dies", true, 20000)
	defer resp.Body.Close()
	served := resp.Header.Get(gateway.HeaderBackend)
	c.backends[served].kill()
	_, err := io.Copy(io.Discard, resp.Body)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the client sees the stream cut")
	c.ts.Close() // waits for every handler

	warns := c.records.atLeast(slog.LevelWarn)
	require.Len(t, warns, 1, "%q", warns)
	assert.Contains(t, warns[0], "backend response body read failed")
	assert.Contains(t, warns[0], "backend="+served)
	assert.Equal(t, map[string]float64{"backend_closed": 1}, c.requestsTotal())
}
