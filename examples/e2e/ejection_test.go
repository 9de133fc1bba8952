package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

// always503 answers 503 to every request but GET /health, which says 200: the backend
// that active health checks cannot catch.
func always503(t *testing.T, hits *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"engine dead","type":"server_error"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// firstTurnsOn sends first turns of new sessions (prefix-0, prefix-1, ...) until want of
// them landed on backend id, and returns those sessions' IDs and results.
func firstTurnsOn(c *cluster, id, prefix string, want int) ([]string, []chatResult) {
	c.t.Helper()
	var ids []string
	var rs []chatResult
	for i := 0; len(ids) < want; i++ {
		require.Less(c.t, i, 500, "no session landed on %s", id)
		sid := fmt.Sprintf("%s-%d", prefix, i)
		r := c.chat(sid, []msg{{Role: "user", Content: "hi"}})
		if r.backend == id {
			ids, rs = append(ids, sid), append(rs, r)
		} else {
			require.Equal(c.t, http.StatusOK, r.status, "%s on %s: %s", sid, r.backend, r.body)
		}
	}
	return ids, rs
}

// Point 3: a backend answering 503 to everything while /health says 200 is ejected
// after consecutive_5xx (5) responses, takes no new placements, shows as ejected in the
// metrics and the log, comes back after base_ejection_seconds and is ejected for twice
// as long the second time.
func TestBackend503WhileHealthy(t *testing.T) {
	var hits atomic.Int64
	url := always503(t, &hits)
	c := newCluster(t, 2, func(cfg *gateway.Config) {
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: "bad", URL: url})
	})
	ids, rs := firstTurnsOn(c, "bad", "s503", 5)
	for _, r := range rs {
		assert.Equal(t, http.StatusServiceUnavailable, r.status, "the backend's own 503 passes through")
	}
	require.Equal(t, []string{"bad"}, c.gw.PassivelyDown(), "ejected after 5 consecutive 5xx")
	assert.Equal(t, health.Down, c.gw.Scheduler().Health().State("bad"))
	assert.Equal(t, int64(5), hits.Load())

	mf := c.metrics()
	assert.Equal(t, 0.0, gauge(mf, gateway.MetricBackendUp, map[string]string{"backend": "bad"}))
	assert.Equal(t, 1.0, gauge(mf, gateway.MetricBackendUp, map[string]string{"backend": "b1"}))
	assert.Equal(t, 1.0, gauge(mf, gateway.MetricBackendState, map[string]string{"backend": "bad", "state": "ejected"}))
	assert.Equal(t, 0.0, gauge(mf, gateway.MetricBackendState, map[string]string{"backend": "bad", "state": "healthy"}))
	assert.Equal(t, 1.0, counter(mf, gateway.MetricBackendEjections, map[string]string{"backend": "bad"}))
	assert.Equal(t, 5.0, counter(mf, gateway.MetricRequests, map[string]string{"code_class": "5xx", "source": "backend"}))
	assert.Equal(t, 5.0, counter(mf, "agentserve_affinity_broken_total", map[string]string{"reason": "down"}), "its 5 bindings broken at ejection")

	recs := c.logs.records("backend state change")
	require.NotEmpty(t, recs)
	assert.Equal(t, "bad", recs[0]["backend"])
	assert.Equal(t, "healthy", recs[0]["from"])
	assert.Equal(t, "down (ejected)", recs[0]["to"])
	assert.Contains(t, recs[0]["why"], "5 consecutive 5xx")

	for _, sid := range ids { // its sessions move on their next turn
		r := c.chat(sid, []msg{{Role: "user", Content: "again"}})
		assert.Equal(t, http.StatusOK, r.status)
		assert.NotEqual(t, "bad", r.backend)
		assert.False(t, r.hit)
	}
	for i := range 40 { // no new placement on it
		r := c.chat(fmt.Sprintf("after-%d", i), []msg{{Role: "user", Content: "hi"}})
		require.Equal(t, http.StatusOK, r.status)
		assert.NotEqual(t, "bad", r.backend)
	}
	assert.Equal(t, int64(5), hits.Load())

	// Back after base_ejection_seconds (its /health says 200) ...
	assert.Empty(t, c.gw.RecheckPassive(context.Background()), "ejection not over yet")
	c.clock.Advance(30 * time.Second)
	assert.Equal(t, []string{"bad"}, c.gw.RecheckPassive(context.Background()))
	assert.Equal(t, health.Healthy, c.gw.Scheduler().Health().State("bad"))
	// ... and ejected again after 5 more 503s, now for 2 x 30 s.
	firstTurnsOn(c, "bad", "again503", 5)
	require.Equal(t, []string{"bad"}, c.gw.PassivelyDown())
	c.clock.Advance(30 * time.Second)
	assert.Empty(t, c.gw.RecheckPassive(context.Background()), "second ejection lasts 60 s")
	c.clock.Advance(30 * time.Second)
	assert.Equal(t, []string{"bad"}, c.gw.RecheckPassive(context.Background()))
	assert.Equal(t, 2.0, counter(c.metrics(), gateway.MetricBackendEjections, map[string]string{"backend": "bad"}))
}

// Point 3: ejection is observed health: a drained backend that gets ejected comes back
// drained, not healthy.
func TestEjectionKeepsDrain(t *testing.T) {
	var hits atomic.Int64
	url := always503(t, &hits)
	c := newCluster(t, 1, func(cfg *gateway.Config) {
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: "bad", URL: url})
	})
	ids, _ := firstTurnsOn(c, "bad", "drain", 1)
	c.gw.Scheduler().OnBackendDraining("bad")
	for range 4 { // a drained backend keeps its sessions: 4 more 503s make 5
		r := c.chat(ids[0], []msg{{Role: "user", Content: "x"}})
		assert.Equal(t, "bad", r.backend)
		assert.True(t, r.hit)
	}
	require.Equal(t, []string{"bad"}, c.gw.PassivelyDown())
	c.clock.Advance(30 * time.Second)
	assert.Equal(t, []string{"bad"}, c.gw.RecheckPassive(context.Background()))
	assert.Equal(t, health.Draining, c.gw.Scheduler().Health().State("bad"), "the operator's drain survives the ejection")

	// And an undrain during an ejection is not reverted when the ejection ends. The other
	// backend goes down, so new sessions land on the drained one (the only eligible).
	c.gw.Scheduler().OnBackendDown("b1")
	for i := range 5 {
		r := c.chat(fmt.Sprintf("drained-only-%d", i), []msg{{Role: "user", Content: "y"}})
		assert.Equal(t, "bad", r.backend)
	}
	c.gw.Scheduler().OnBackendUp("b1")
	require.Equal(t, []string{"bad"}, c.gw.PassivelyDown())
	c.gw.Scheduler().Undrain("bad")
	assert.Equal(t, health.Down, c.gw.Scheduler().Health().State("bad"), "still ejected")
	c.clock.Advance(60 * time.Second)
	assert.Equal(t, []string{"bad"}, c.gw.RecheckPassive(context.Background()))
	assert.Equal(t, health.Healthy, c.gw.Scheduler().Health().State("bad"))
}

// Point 3: with the default consecutive_connect_failures (3) a dead backend's first two
// failures are retried on the session's next choice without breaking its binding; the
// third ejects it and breaks every binding on it at once. max_ejection_percent keeps the
// last of two backends in.
func TestOutlierThreshold(t *testing.T) {
	c := newCluster(t, 3, nil)
	ids, _ := firstTurnsOn(c, "b1", "thr", 4)
	c.killBackend("b1")
	for i, sid := range ids[:3] {
		r := c.chat(sid, []msg{{Role: "user", Content: "turn 2"}})
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		assert.NotEqual(t, "b1", r.backend)
		assert.False(t, r.hit)
		if i < 2 {
			bound, ok := c.gw.Scheduler().Lookup(sid, "")
			assert.True(t, ok)
			assert.Equal(t, "b1", bound, "one failure is not an outage: the binding stays")
			assert.Empty(t, c.gw.PassivelyDown())
		}
	}
	require.Equal(t, []string{"b1"}, c.gw.PassivelyDown())
	assert.Equal(t, 4.0, counter(c.metrics(), "agentserve_affinity_broken_total", map[string]string{"reason": "down"}))

	// b2 dies too: with 3 backends and max_ejection_percent 50 only one may be ejected.
	c.killBackend("b2")
	for i := range 30 {
		r := c.chat(fmt.Sprintf("thr2-%d", i), []msg{{Role: "user", Content: "x"}})
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	assert.Equal(t, []string{"b1"}, c.gw.PassivelyDown())
	assert.NotEmpty(t, c.logs.records("backend not ejected: max_ejection_percent reached"))
}
