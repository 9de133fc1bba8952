package gateway_test

import (
	"context"
	"fmt"
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

// probedBackend is a JSON backend whose /health answers 503 until healthy is set and
// counts its probes in probes (nil: not counted); it returns its URL and is closed at the
// test's end.
func probedBackend(t *testing.T, healthy *atomic.Bool, probes *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if probes != nil {
				probes.Add(1)
			}
			if !healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// churn is a gateway whose backend set a test changes by adding one backend per reload.
type churn struct {
	t          *testing.T
	g          *gateway.Gateway
	urls, ids  []string
	weights    []float64
	hc         string
	probesOfX  atomic.Int64 // probes of backend "x"
	probesOfB0 atomic.Int64 // probes of backend "b0" (always healthy)
	healthy    atomic.Bool  // x's health
}

func newChurn(t *testing.T, hc string) *churn {
	c := &churn{t: t, hc: hc}
	up := new(atomic.Bool)
	up.Store(true)
	c.urls = []string{probedBackend(t, up, &c.probesOfB0), probedBackend(t, &c.healthy, &c.probesOfX)}
	c.ids = []string{"b0", "x"}
	c.weights = []float64{1, 1}
	g, err := gateway.New(yamlConfig(t, c.urls, c.ids, c.weights, hc))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	c.g = g
	return c
}

func (c *churn) state() health.State { return c.g.Scheduler().Health().State("x") }

// reload adds one backend ("n<k>", always healthy) and reloads: the prober is rebuilt.
func (c *churn) reload() {
	c.t.Helper()
	var ignored atomic.Int64
	up := new(atomic.Bool)
	up.Store(true)
	c.urls = append(c.urls, probedBackend(c.t, up, &ignored))
	c.ids = append(c.ids, fmt.Sprintf("n%d", len(c.ids)))
	c.weights = append(c.weights, 1)
	require.NoError(c.t, c.g.Reload(yamlConfig(c.t, c.urls, c.ids, c.weights, c.hc)))
}

// A reload that changes the backend set between every two probe rounds still lets a dead
// backend go Down after failure_threshold failed probes, and a backend held Down come
// back after success_threshold passed ones (before: each reload built a prober that
// started it Healthy with its failure count at 0, or Down with its success count at 0,
// so reloads more frequent than threshold x interval kept a dead backend in rotation, or
// a recovered one out of it, forever).
func TestReloadKeepsHealthCountsRounds(t *testing.T) {
	c := newChurn(t, "health: {enabled: true, failure_threshold: 3, success_threshold: 2}\n")
	ctx := context.Background()
	for i := range 2 {
		c.g.ProbeOnce(ctx)
		require.Equal(t, health.Healthy, c.state(), "after %d failed probes", i+1)
		c.reload()
	}
	c.g.ProbeOnce(ctx)
	require.Equal(t, health.Down, c.state(), "Down after 3 failed probes, with a reload between each two")

	c.healthy.Store(true)
	c.g.ProbeOnce(ctx)
	require.Equal(t, health.Down, c.state(), "one passed probe of two")
	c.reload()
	c.g.ProbeOnce(ctx)
	assert.Equal(t, health.Healthy, c.state(), "Healthy after 2 passed probes, with a reload between them")
}

// The same with the probe schedule on a fake clock: a reload every 0.6 interval (3 s at
// 5 s: tester37 reloaded every 3.3-8 s) no longer restarts the count, and no longer
// probes every backend at once: a backend that stays is probed once per interval whatever
// the reloads, and only the added backend is probed at once.
func TestReloadKeepsHealthCountsSchedule(t *testing.T) {
	c := newChurn(t, "health: {enabled: true, interval_seconds: 5, failure_threshold: 3, success_threshold: 2}\n")
	ctx := context.Background()
	const interval = 5 * time.Second
	now := time.Unix(1_800_000_000, 0)
	c.g.ProbeDue(ctx, now) // every backend is new: probed at once
	require.Equal(t, int64(1), c.probesOfX.Load())
	lastReload := now
	stepUntil := func(what string, done func() bool) time.Duration {
		start := now
		for ; !done(); now = now.Add(interval / 64) {
			require.Less(t, now.Sub(start), 10*interval, "%s within 10 intervals", what)
			if now.Sub(lastReload) >= interval*6/10 {
				c.reload()
				lastReload = now
			}
			c.g.ProbeDue(ctx, now)
		}
		return now.Sub(start)
	}
	took := stepUntil("Down", func() bool { return c.state() == health.Down })
	assert.Equal(t, int64(3), c.probesOfX.Load(), "Down after 3 failed probes")
	assert.Less(t, took, 3*interval, "about two intervals after the first probe")
	b0 := c.probesOfB0.Load()
	assert.InDelta(t, float64(took/interval)+1, float64(b0), 1, "b0 probed once per interval despite %v of reloads", took)

	c.healthy.Store(true)
	c.probesOfX.Store(0)
	stepUntil("Healthy", func() bool { return c.state() == health.Healthy })
	assert.Equal(t, int64(2), c.probesOfX.Load(), "Healthy after 2 passed probes")
}
