package affinity_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// A replacing health.Prober wired with WithReporter(sched.Observe) brings the Scheduler
// to its view: a backend the old prober marked Down that is healthy now comes back
// (Healthy, or Draining if drained), and Retain forgets backends no longer configured.
func TestSchedulerConvergesOnANewProber(t *testing.T) {
	var healthy [3]atomic.Bool
	var urls [3]string
	for i := range healthy {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !healthy[i].Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	targets := func(ids ...int) []health.Target {
		var out []health.Target
		for _, i := range ids {
			out = append(out, health.Target{ID: fmt.Sprintf("b%d", i), URL: urls[i]})
		}
		return out
	}
	f := newFixture(t, affinity.Config{})
	ctx := context.Background()
	cfg := health.ProbeConfig{FailureThreshold: 1}

	old, err := health.NewProber(cfg, targets(0, 1, 2), health.WithReporter(f.s.Observe))
	require.NoError(t, err)
	old.ProbeOnce(ctx) // all three fail: Down
	f.s.OnBackendDraining("b1")
	require.Equal(t, map[string]health.State{"b0": health.Down, "b1": health.Down, "b2": health.Down}, f.s.Health().Snapshot())

	healthy[0].Store(true)
	healthy[1].Store(true)
	assert.Equal(t, 1, f.s.Health().Retain([]string{"b0", "b1"}), "b2 is no longer configured")
	next, err := health.NewProber(cfg, targets(0, 1), health.WithReporter(f.s.Observe))
	require.NoError(t, err)
	next.ProbeOnce(ctx)
	assert.Equal(t, map[string]health.State{"b1": health.Draining}, f.s.Health().Snapshot(),
		"b0 healthy after one round, b1 back but still drained, b2 forgotten")
}
