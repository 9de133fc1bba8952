package e2e_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Six-turn sessions over three backends: turn 1 misses, turns 2-6 hit, so the hit rate
// is exactly 5/6, both in the response headers and in the gateway's /metrics.
func TestHitRateFiveSixths(t *testing.T) {
	c := newCluster(t, 3, nil)
	const sessions, turns = 12, 6
	var hits, total int
	used := map[string]int{}
	for s := range sessions {
		sess := newSession(fmt.Sprintf("sess-%02d", s))
		var first string
		for turn := 1; turn <= turns; turn++ {
			r := sess.turn(c)
			total++
			require.NotEmpty(t, r.backend, "X-Agent-Serve-Backend")
			assert.Equal(t, r.backend, r.fakeFrom, "the backend named in the header answered")
			require.True(t, r.hasMeta, "x_agent_serve object in %s", r.body)
			assert.Equal(t, gateway.Metadata{Backend: r.backend, AffinityHit: r.hit, Tier: ""}, r.meta)
			assert.Equal(t, strconv.Itoa(len(r.body)), r.header.Get("Content-Length"))
			if turn == 1 {
				first = r.backend
				used[first]++
				assert.False(t, r.hit, "first turn is a miss")
				assert.Equal(t, "false", r.header.Get(gateway.HeaderAffinityHit))
			} else {
				assert.True(t, r.hit, "turn %d is a hit", turn)
				assert.Equal(t, "true", r.header.Get(gateway.HeaderAffinityHit))
				assert.Equal(t, first, r.backend, "turn %d stays on the session's backend", turn)
				assert.Positive(t, r.cached, "turn %d reuses the backend's prefix cache", turn)
			}
			if r.hit {
				hits++
			}
		}
	}
	assert.Equal(t, 5*total, 6*hits, "hit rate from headers: %d/%d", hits, total)
	assert.Greater(t, len(used), 1, "sessions spread over backends: %v", used)

	mf := c.metrics()
	h := counter(mf, "agentserve_affinity_hits_total", nil)
	m := counter(mf, "agentserve_affinity_misses_total", nil)
	assert.Equal(t, float64(sessions*(turns-1)), h)
	assert.Equal(t, float64(sessions), m)
	assert.Equal(t, 5.0/6.0, h/(h+m), "hit rate from /metrics")
	require.Contains(t, mf, "agentserve_affinity_bindings")
	assert.Equal(t, float64(sessions), mf["agentserve_affinity_bindings"].GetMetric()[0].GetGauge().GetValue())
}

func TestBadRequests(t *testing.T) {
	c := newCluster(t, 3, func(cfg *gateway.Config) {
		cfg.RequireSession = true
		cfg.MaxBodyBytes = 2048
		cfg.Affinity.MaxSessionIDBytes = 16
	})
	sid := map[string]string{"X-Session-ID": "ok-session"}
	tests := []struct {
		name    string
		headers map[string]string
		body    string
		status  int
		code    string
		message string
	}{
		{"malformed JSON", sid, `{"model": "m", "messages": [`, 400, "invalid_json", "malformed JSON"},
		{"body not an object", sid, `[1,2,3]`, 400, "invalid_json", "malformed JSON request body: must be a JSON object, got array"},
		{"body null", sid, ` null `, 400, "invalid_json", "must be a JSON object, got null"},
		{"empty body", sid, ``, 400, "invalid_json", "malformed JSON request body: empty body"},
		{"model not a string", sid, `{"model": 7}`, 400, "invalid_json", `"model" must be a string`},
		{"oversized body", sid, `{"x":"` + strings.Repeat("a", 4096) + `"}`, 413, "request_too_large", "2048"},
		{"missing session", nil, `{"model":"m"}`, 400, "missing_session_id", "X-Session-ID"},
		{"session too long", map[string]string{"X-Session-ID": strings.Repeat("s", 17)}, `{"model":"m"}`, 400, "session_id_too_long", ""},
		{"unknown tier", map[string]string{"X-Session-ID": "s", "X-Agent-Serve-Tier": "gold"}, `{"model":"m"}`, 400, "unknown_tier", `"gold"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.post("/v1/chat/completions", tt.headers, []byte(tt.body))
			assert.Equal(t, tt.status, r.status)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
			code, message := errorCode(t, r.body)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, message, tt.message)
		})
	}
	t.Run("malformed JSON with curl's form content type", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, c.url+"/v1/chat/completions", strings.NewReader(`{"model":`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Session-ID", "s")
		resp, err := c.client.Do(req)
		require.NoError(t, err)
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		code, _ := errorCode(t, data)
		assert.Equal(t, "invalid_json", code)
	})
	for id, b := range c.backends {
		assert.Zero(t, b.sim.Stats().Requests, "backend %s saw a rejected request", id)
	}
	assert.Zero(t, c.gw.Scheduler().Len(), "a rejected request binds no session")

	for id := range c.backends {
		c.gw.Scheduler().OnBackendDown(id)
	}
	r := c.post("/v1/chat/completions", sid, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	assert.Equal(t, http.StatusServiceUnavailable, r.status)
	code, _ := errorCode(t, r.body)
	assert.Equal(t, "no_backend_available", code)
}

// Without a session ID (and require_session off) a request is routed like "affinity
// off": HRW over the request key, no binding stored, neither hit nor miss counted.
func TestNoSessionRoutesWithoutBinding(t *testing.T) {
	c := newCluster(t, 3, nil)
	body := []byte(`{"model":"fake-model","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`)
	first := c.post("/v1/chat/completions", map[string]string{"X-Request-Id": "req-42"}, body)
	require.Equal(t, http.StatusOK, first.status, "%s", first.body)
	assert.False(t, first.hit)
	assert.Equal(t, first.backend, first.meta.Backend)
	again := c.post("/v1/chat/completions", map[string]string{"X-Request-Id": "req-42"}, body)
	assert.Equal(t, first.backend, again.backend, "same request key, same backend")
	assert.False(t, again.hit)
	for _, r := range []chatResult{first, again} {
		assert.NotContains(t, r.header, gateway.HeaderOutcome, "no placement outcome without a session")
	}
	seen := map[string]bool{}
	for range 30 {
		seen[c.chat("", []msg{{Role: "user", Content: "y"}}).backend] = true
	}
	assert.Len(t, seen, 3, "random keys spread over every backend")
	assert.Zero(t, c.gw.Scheduler().Len())
	mf := c.metrics()
	assert.Zero(t, counter(mf, "agentserve_affinity_hits_total", nil)+counter(mf, "agentserve_affinity_misses_total", nil))
}

// Session headers are checked in configured order; agent-harness headers work too.
func TestSessionHeaders(t *testing.T) {
	c := newCluster(t, 3, nil)
	body := []byte(`{"model":"fake-model","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`)
	for _, h := range []string{"X-Session-Id", "X-Claude-Code-Session-Id", "Session-Id", "X-Opencode-Session"} {
		r := c.post("/v1/chat/completions", map[string]string{h: "via-" + h}, body)
		require.Equal(t, http.StatusOK, r.status)
		_, ok := c.gw.Scheduler().Lookup("via-"+h, "")
		assert.True(t, ok, "binding for header %s", h)
	}
	r := c.post("/v1/chat/completions", map[string]string{"X-Claude-Code-Session-Id": "second", "X-Session-ID": "first"}, body)
	require.Equal(t, http.StatusOK, r.status)
	_, ok := c.gw.Scheduler().Lookup("first", "")
	assert.True(t, ok, "X-Session-ID is checked first")
	_, ok = c.gw.Scheduler().Lookup("second", "")
	assert.False(t, ok)
}

// Tiers: from the header or the model map; candidates are the tier's own backends, and
// a tier without dedicated backends uses all of them.
func TestTierRouting(t *testing.T) {
	c := newCluster(t, 4, func(cfg *gateway.Config) {
		cfg.Backends[0].Tier, cfg.Backends[1].Tier = "large", "large"
		cfg.ModelTiers = map[string]string{"big-model": "large", "other-model": "batch"}
		cfg.Affinity.Tiers = map[string]affinity.TierConfig{"batch": {StickyTTLSeconds: affinity.TTLSeconds(60)}}
	})
	large := map[string]bool{"b1": true, "b2": true}
	send := func(session, model string, h map[string]string) chatResult {
		if h == nil {
			h = map[string]string{}
		}
		h["X-Session-ID"] = session
		r := c.post("/v1/chat/completions", h, []byte(`{"model":"`+model+`","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`))
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		return r
	}
	batchSeen := map[string]bool{}
	for i := range 24 {
		s := fmt.Sprintf("tier-%d", i)
		r := send(s, "big-model", nil)
		assert.True(t, large[r.backend], "model big-model -> tier large: %s", r.backend)
		assert.Equal(t, "large", r.meta.Tier)
		r = send(s, "plain", map[string]string{"X-Agent-Serve-Tier": "large"})
		assert.True(t, large[r.backend], "tier header: %s", r.backend)
		assert.True(t, r.hit, "same (session, tier) binding")
		r = send(s, "plain", nil)
		assert.False(t, large[r.backend], "default tier uses its dedicated backends: %s", r.backend)
		assert.Equal(t, "", r.meta.Tier)
		r = send(s, "other-model", nil)
		assert.Equal(t, "batch", r.meta.Tier)
		batchSeen[r.backend] = true
	}
	assert.Len(t, batchSeen, 4, "a tier without dedicated backends uses all of them")
}

func TestGatewayEndpoints(t *testing.T) {
	c := newCluster(t, 1, nil)
	resp, err := c.client.Get(c.url + "/healthz")
	require.NoError(t, err)
	data, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"status":"ok"}`, string(data))

	req, _ := http.NewRequest(http.MethodGet, c.url+"/v1/models", nil)
	req.Header.Set("X-Session-ID", "models")
	resp, err = c.client.Do(req)
	require.NoError(t, err)
	data, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "b1", resp.Header.Get(gateway.HeaderBackend))
	assert.True(t, bytes.HasPrefix(data, []byte(`{"x_agent_serve":{"backend":"b1","affinity_hit":false,"tier":""},`)), "%s", data)
}
