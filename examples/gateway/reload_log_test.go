package gateway_test

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// The "config reloaded" line names what changed on each backend that stays: its weight,
// tier and URL (before: a weight-only reload logged added=[] removed=[] and nothing an
// operator could confirm the change by, tester25 #4); a reload whose config is spelled
// differently but means the same (weight omitted for 1) lists nothing, and one whose
// config is the same logs "config unchanged" instead (TestReloadUnchangedConfig).
func TestReloadLogNamesBackendChanges(t *testing.T) {
	urls := jsonBackends(t, 3)
	base := func() gateway.Config {
		return gateway.Config{
			Listen: "127.0.0.1:0",
			Backends: []gateway.BackendConfig{
				{ID: "vllm-a", URL: urls[0], Weight: 1},
				{ID: "vllm-b", URL: urls[1]},
			},
			Health: gateway.HealthConfig{Enabled: new(false)},
		}
	}
	tests := []struct {
		name    string
		change  func(*gateway.Config)
		weights []string // want weight_changed
		tiers   []string // want tier_changed
		urls    []string // want url_changed
		drained []string // want drained
	}{
		{"weight 1 -> 2", func(c *gateway.Config) { c.Backends[0].Weight = 2 }, []string{"vllm-a:1->2"}, nil, nil, nil},
		{"weights of both", func(c *gateway.Config) { c.Backends[0].Weight, c.Backends[1].Weight = 0.5, 3 },
			[]string{"vllm-a:1->0.5", "vllm-b:1->3"}, nil, nil, nil},
		{"weight 1 -> omitted (1)", func(c *gateway.Config) { c.Backends[0].Weight = 0 }, nil, nil, nil, nil},
		{"tier", func(c *gateway.Config) { c.Backends[1].Tier = "large" }, nil, []string{"vllm-b:(default)->large"}, nil, nil},
		{"url", func(c *gateway.Config) { c.Backends[1].URL = urls[2] }, nil, nil, []string{"vllm-b:" + urls[1] + "->" + urls[2]}, nil},
		{"drain only", func(c *gateway.Config) { c.Backends[0].Drain = true }, nil, nil, nil, []string{"vllm-a"}},
		{"added and removed backends are not changes", func(c *gateway.Config) {
			c.Backends[1] = gateway.BackendConfig{ID: "vllm-c", URL: urls[2], Weight: 5}
		}, nil, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &records{}
			g, err := gateway.New(base(), gateway.WithLogger(slog.New(logs)))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			cfg := base()
			tt.change(&cfg)
			require.NoError(t, g.Reload(cfg))
			line := logs.attrs("config reloaded")
			require.NotNil(t, line)
			for key, want := range map[string][]string{
				"weight_changed": tt.weights, "tier_changed": tt.tiers, "url_changed": tt.urls, "drained": tt.drained,
			} {
				require.Contains(t, line, key)
				assert.Equal(t, want, line[key], key)
			}
		})
	}
}

// A reload that replaces many backends (pod churn) names at most 20 of each list in the
// "config reloaded" line, then "+N more" (tester37: one line listed every ID, 56 KB); a
// list of 20 or fewer is given whole.
func TestReloadLogCapsItsLists(t *testing.T) {
	urls := jsonBackends(t, 1)
	cfgOf := func(prefix string, n int) gateway.Config {
		c := gateway.Config{Listen: "127.0.0.1:0", Health: gateway.HealthConfig{Enabled: new(false)}}
		for i := range n {
			c.Backends = append(c.Backends, gateway.BackendConfig{ID: fmt.Sprintf("%s-%02d", prefix, i), URL: urls[0]})
		}
		return c
	}
	logs := &records{}
	g, err := gateway.New(cfgOf("old", 20), gateway.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	require.NoError(t, g.Reload(cfgOf("new", 35)))
	line := logs.attrs("config reloaded")
	require.NotNil(t, line)
	added, removed := line["added"].([]string), line["removed"].([]string)
	require.Len(t, added, 21)
	assert.Equal(t, "new-00", added[0])
	assert.Equal(t, "new-19", added[19])
	assert.Equal(t, "+15 more", added[20])
	require.Len(t, removed, 20, "20 removed: named whole")
	assert.Equal(t, "old-19", removed[19])
}
