package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
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

// A backend killed mid-study: its sessions rebind on their next turn (passive health
// check + retry once), the broken bindings are counted with reason "down", no request
// is lost; after it answers /health again it is back for new sessions, and moved
// sessions do not fail back.
//
// One-strike ejection (consecutive_connect_failures: 1) keeps this test about rebinding;
// TestOutlierThreshold covers the default streak.
func TestBackendKilledMidStudy(t *testing.T) {
	c := newCluster(t, 3, func(cfg *gateway.Config) { cfg.OutlierDetection.ConsecutiveConnectFailures = 1 })
	var sess []*session
	bound := map[string]string{}
	for i := range 12 {
		s := newSession(fmt.Sprintf("kill-%02d", i))
		sess = append(sess, s)
		for range 3 {
			bound[s.id] = s.turn(c).backend
		}
	}
	victim := bound[sess[0].id]
	affected := 0
	for _, b := range bound {
		if b == victim {
			affected++
		}
	}
	c.killBackend(victim)

	for turn := 4; turn <= 6; turn++ {
		for _, s := range sess {
			r := s.turn(c) // asserts 200: nothing lost
			assert.NotEqual(t, victim, r.backend)
			switch {
			case bound[s.id] != victim:
				assert.True(t, r.hit, "%s turn %d: untouched session keeps its binding", s.id, turn)
				assert.Equal(t, bound[s.id], r.backend)
			case turn == 4:
				assert.False(t, r.hit, "%s: rebinding turn is a miss", s.id)
			default:
				assert.True(t, r.hit, "%s turn %d: hit on the new backend", s.id, turn)
			}
			assert.Equal(t, r.meta.Backend, r.backend)
		}
		if turn == 4 {
			for _, s := range sess {
				if b, ok := c.gw.Scheduler().Lookup(s.id, ""); assert.True(t, ok) {
					bound[s.id] = b
				}
			}
		}
	}
	mf := c.metrics()
	assert.Equal(t, float64(affected), counter(mf, "agentserve_affinity_broken_total", map[string]string{"reason": "down"}))
	assert.Equal(t, float64(12+affected), counter(mf, "agentserve_affinity_misses_total", nil))
	// The one request that found the backend dead was first counted as a hit (its binding
	// was still valid) and then, on the retry, as a miss; sequential turns mean exactly one.
	assert.Equal(t, float64(12*5-affected+1), counter(mf, "agentserve_affinity_hits_total", nil))
	assert.Equal(t, []string{victim}, c.gw.PassivelyDown())
	assert.Equal(t, health.Down, c.gw.Scheduler().Health().State(victim))

	// Ejected for base_ejection_seconds (30 s): before that no re-check happens; after it,
	// a backend still failing its health check stays ejected.
	assert.Empty(t, c.gw.RecheckPassive(context.Background()))
	c.clock.Advance(30 * time.Second)
	assert.Empty(t, c.gw.RecheckPassive(context.Background()))
	c.backends[victim].restart(t)
	assert.Equal(t, []string{victim}, c.gw.RecheckPassive(context.Background()))
	assert.Empty(t, c.gw.PassivelyDown())
	assert.Equal(t, health.Healthy, c.gw.Scheduler().Health().State(victim))

	for _, s := range sess { // no failback
		r := s.turn(c)
		assert.True(t, r.hit)
		assert.Equal(t, bound[s.id], r.backend)
	}
	landed := false
	for i := 0; i < 64 && !landed; i++ { // new sessions can land on it again
		landed = newSession(fmt.Sprintf("new-%02d", i)).turn(c).backend == victim
	}
	assert.True(t, landed, "a new session lands on the recovered backend")
}

// With retry_on_connect_error: false the request that hits the dead backend fails with
// a JSON 502; the backend is marked down all the same and the next turn rebinds.
func TestKilledBackendWithoutRetry(t *testing.T) {
	c := newCluster(t, 2, func(cfg *gateway.Config) {
		cfg.RetryOnConnectError = new(bool)
		cfg.OutlierDetection.ConsecutiveConnectFailures = 1
	})
	s := newSession("no-retry")
	victim := s.turn(c).backend
	c.killBackend(victim)

	s.msgs = append(s.msgs, msg{Role: "user", Content: "again"})
	r := c.chat(s.id, s.msgs)
	assert.Equal(t, http.StatusBadGateway, r.status)
	code, _ := errorCode(t, r.body)
	assert.Equal(t, "backend_unavailable", code)
	assert.Equal(t, victim, r.backend)

	r = c.chat(s.id, s.msgs)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.NotEqual(t, victim, r.backend)
	assert.False(t, r.hit)
}

// The active prober drives the scheduler: a backend failing /health goes Down, its
// sessions rebind (broken, reason down), and it comes back Healthy.
func TestActiveHealthCheck(t *testing.T) {
	c := newCluster(t, 3, func(cfg *gateway.Config) {
		cfg.Health.Enabled = new(true)
		cfg.Health.FailureThreshold = 1
		cfg.Health.SuccessThreshold = 1
	})
	ctx := context.Background()
	s := newSession("active")
	victim := s.turn(c).backend
	c.backends[victim].sim.SetHealthy(false)
	c.gw.ProbeOnce(ctx)
	require.Equal(t, health.Down, c.gw.Scheduler().Health().State(victim))

	r := s.turn(c)
	assert.NotEqual(t, victim, r.backend)
	assert.False(t, r.hit)
	assert.Equal(t, 1.0, counter(c.metrics(), "agentserve_affinity_broken_total", map[string]string{"reason": "down"}))

	c.backends[victim].sim.SetHealthy(true)
	c.gw.ProbeOnce(ctx)
	assert.Equal(t, health.Healthy, c.gw.Scheduler().Health().State(victim))
	r2 := s.turn(c)
	assert.True(t, r2.hit, "no failback")
	assert.Equal(t, r.backend, r2.backend)
}

// SSE passes through chunk by chunk: the client reads the first event while the backend
// is still blocked before writing the rest.
func TestStreamingIsNotBuffered(t *testing.T) {
	release := make(chan struct{})
	timedOut := make(chan bool, 1)
	sse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" { // the active prober's first round
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
			timedOut <- false
		case <-time.After(10 * time.Second): // only reached when the gateway buffers
			timedOut <- true
		}
		_, _ = io.WriteString(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	defer sse.Close()

	c := &cluster{t: t, backends: map[string]*backendServer{}, recheck: make(chan time.Time)}
	c.start(gateway.Config{Backends: []gateway.BackendConfig{{ID: "sse", URL: sse.URL}}})

	req, err := http.NewRequest(http.MethodPost, c.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", "stream-1")
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "sse", resp.Header.Get(gateway.HeaderBackend))
	assert.Equal(t, "false", resp.Header.Get(gateway.HeaderAffinityHit))
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: {\"n\":1}\n", first)
	close(release)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: {\"n\":2}\n\ndata: [DONE]\n\n", string(rest))
	assert.False(t, <-timedOut, "the first event reached the client only after the backend finished: buffered")
}

// A real fakevllm stream through the gateway: many chunks, [DONE], no metadata injected.
func TestStreamingFromSimulator(t *testing.T) {
	c := newCluster(t, 3, nil)
	body := `{"model":"fake-model","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hello"}]}`
	r := c.post("/v1/chat/completions", map[string]string{"X-Session-ID": "s-stream"}, []byte(body))
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, r.backend, r.fakeFrom)
	assert.Contains(t, r.header.Get("Content-Type"), "text/event-stream")
	events := strings.Count(string(r.body), "data: ")
	assert.GreaterOrEqual(t, events, 7, "role + 5 tokens + finish + [DONE]")
	assert.True(t, strings.HasSuffix(string(r.body), "data: [DONE]\n\n"))
	assert.NotContains(t, string(r.body), gateway.MetadataKey)
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
