package gateway_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// reloadCounts reads MetricConfigReloads by result and MetricConfigLastReloadOK.
func reloadCounts(t *testing.T, g *gateway.Gateway) (map[string]float64, float64) {
	t.Helper()
	mfs, err := g.Registry().Gather()
	require.NoError(t, err)
	counts, ok := map[string]float64{}, -1.0
	for _, mf := range mfs {
		switch mf.GetName() {
		case gateway.MetricConfigReloads:
			for _, m := range mf.GetMetric() {
				counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		case gateway.MetricConfigLastReloadOK:
			ok = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return counts, ok
}

// Every reload is counted by result, through the API and from a file, and the
// last-reload gauge says whether the config on disk is the one serving (tester46: a
// rejected reload showed in the log only).
func TestReloadMetrics(t *testing.T) {
	urls := jsonBackends(t, 2)
	ids := []string{"b0", "b1"}
	base := yamlConfig(t, urls, ids, []float64{1, 1}, "")
	g, err := gateway.New(base)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	steps := []struct {
		name   string
		do     func() error
		failed bool
		want   map[string]float64
		ok     float64
	}{
		{"start", func() error { return nil }, false, map[string]float64{"applied": 0, "unchanged": 0, "rejected": 0}, 1},
		{"same config", func() error { return g.Reload(base) }, false, map[string]float64{"applied": 0, "unchanged": 1, "rejected": 0}, 1},
		{"weights", func() error { return g.Reload(yamlConfig(t, urls, ids, []float64{1, 3}, "")) }, false,
			map[string]float64{"applied": 1, "unchanged": 1, "rejected": 0}, 1},
		{"listen change", func() error {
			cfg := yamlConfig(t, urls, ids, []float64{1, 3}, "")
			cfg.Listen = "127.0.0.1:1" // needs a restart
			return g.Reload(cfg)
		}, true,
			map[string]float64{"applied": 1, "unchanged": 1, "rejected": 1}, 0},
		{"missing file", func() error { return g.ReloadFileFor(path, gateway.TriggerAPI, nil) }, true,
			map[string]float64{"applied": 1, "unchanged": 1, "rejected": 2}, 0},
		{"bad file", func() error {
			require.NoError(t, os.WriteFile(path, []byte("backends: nope\n"), 0o600))
			return g.ReloadFileFor(path, gateway.TriggerAPI, nil)
		}, true, map[string]float64{"applied": 1, "unchanged": 1, "rejected": 3}, 0},
		{"good file", func() error {
			require.NoError(t, os.WriteFile(path, []byte("listen: 127.0.0.1:0\nbackends:\n  - {id: b0, url: \""+urls[0]+"\"}\n"), 0o600))
			return g.ReloadFileFor(path, gateway.TriggerAPI, nil)
		}, false, map[string]float64{"applied": 2, "unchanged": 1, "rejected": 3}, 1},
	}
	for _, st := range steps {
		err := st.do()
		if st.failed {
			require.Error(t, err, st.name)
		} else {
			require.NoError(t, err, st.name)
		}
		counts, ok := reloadCounts(t, g)
		assert.Equal(t, st.want, counts, st.name)
		assert.Equal(t, st.ok, ok, st.name)
	}
}
