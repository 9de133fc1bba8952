package gateway_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

// A reload that rebuilds the prober keeps a backend the old one held Down Down until it
// passes success_threshold probes (before: marked up at once, silently, by every reload
// of the health settings); a backend whose URL changed, or every one when health checks
// are turned off, is marked up with a "backend state change" line.
func TestReloadProberKeepsDownBackendsDown(t *testing.T) {
	tests := []struct {
		name     string
		health   string // the reloaded health block
		moveURL  bool   // b1 gets another URL (same handler)
		heldDown bool   // b1 still Down after the reload
		upLogWhy string // with !heldDown: the why of the logged mark-up
	}{
		{"health interval changed", "health: {enabled: true, interval_seconds: 7, failure_threshold: 1, success_threshold: 2}\n", false, true, ""},
		{"url changed", "health: {enabled: true, failure_threshold: 1, success_threshold: 2}\n", true, false, "url changed"},
		{"health disabled", "health: {enabled: false}\n", false, false, "health checks disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var healthy atomic.Bool
			flaky := func() string { return probedBackend(t, &healthy, nil) }
			urls := append(jsonBackends(t, 1), flaky())
			ids := []string{"b0", "b1"}
			logger, logs := captureLogs()
			g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1},
				"health: {enabled: true, failure_threshold: 1, success_threshold: 2}\n"), gateway.WithLogger(logger))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			state := func() health.State { return g.Scheduler().Health().State("b1") }
			changes := func() int { return strings.Count(logs.String(), `"msg":"backend state change","backend":"b1"`) }
			g.ProbeOnce(context.Background())
			require.Equal(t, health.Down, state())
			require.Equal(t, 1, changes())

			if tt.moveURL {
				urls[1] = flaky()
			}
			require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1}, tt.health)))
			require.Contains(t, logs.String(), `"prober_rebuilt":true`)
			if !tt.heldDown {
				assert.Equal(t, health.Healthy, state())
				assert.Equal(t, 2, changes(), "the mark-up is logged")
				assert.Contains(t, logs.String(), tt.upLogWhy)
				return
			}
			assert.Equal(t, health.Down, state(), "still Down after the reload")
			assert.Contains(t, logs.String(), `"held_down":["b1"]`)
			healthy.Store(true)
			g.ProbeOnce(context.Background())
			assert.Equal(t, health.Down, state(), "one passing probe of two")
			assert.Equal(t, 1, changes())
			g.ProbeOnce(context.Background())
			assert.Equal(t, health.Healthy, state(), "back after success_threshold")
			assert.Equal(t, 2, changes(), "and logged")
			assert.Contains(t, logs.String(), `"from":"down","to":"healthy"`)
		})
	}
}

// A backend that a reload removed while the active check held it Down and a later reload
// adds back with the same URL (a configuration rolled back) is held Down until it passes
// success_threshold probes (before: Healthy at once, with no log line, and sent traffic);
// added back with another URL it starts Healthy.
func TestReloadAddedBackWhileDown(t *testing.T) {
	for _, sameURL := range []bool{true, false} {
		t.Run(map[bool]string{true: "same url", false: "other url"}[sameURL], func(t *testing.T) {
			var healthy atomic.Bool
			flaky := func() string { return probedBackend(t, &healthy, nil) }
			const hc = "health: {enabled: true, failure_threshold: 1, success_threshold: 2}\n"
			urls := append(jsonBackends(t, 1), flaky())
			ids := []string{"b0", "b1"}
			logger, logs := captureLogs()
			g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1}, hc), gateway.WithLogger(logger))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			state := func() health.State { return g.Scheduler().Health().State("b1") }
			g.ProbeOnce(context.Background())
			require.Equal(t, health.Down, state())

			require.NoError(t, g.Reload(yamlConfig(t, urls[:1], ids[:1], []float64{1}, hc)))
			require.Contains(t, logs.String(), `"removed":["b1"]`)
			if !sameURL {
				urls[1] = flaky()
			}
			require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1}, hc)))
			if !sameURL {
				assert.Equal(t, health.Healthy, state(), "another server: not held")
				assert.Contains(t, logs.String(), `"held_down":null`)
				return
			}
			assert.Equal(t, health.Down, state(), "held Down after being added back")
			assert.Contains(t, logs.String(), `"added":["b1"]`)
			assert.Contains(t, logs.String(), `"held_down":["b1"]`)
			assert.Contains(t, logs.String(), "added back with the URL it had")
			healthy.Store(true)
			g.ProbeOnce(context.Background())
			assert.Equal(t, health.Down, state(), "one passing probe of two")
			g.ProbeOnce(context.Background())
			assert.Equal(t, health.Healthy, state(), "back after success_threshold")
		})
	}
}
