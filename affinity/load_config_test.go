package affinity_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

func TestLoadConfig(t *testing.T) {
	cases := []configCase{
		{"absent is off", `{}`, ""},
		{"factor only", `{"load": {"balance_factor": 1.25}}`, ""},
		{"all keys", `{"load": {"balance_factor": 1.5, "spill_cost_weight": 0, "disable_spill": true, "queued_request_cost": 2048, "cold_cache_ratio": 0.1}}`, ""},
		{"factor below 1", `{"load": {"balance_factor": 0.9}}`, "load.balance_factor: 0.9"},
		{"factor negative", `{"load": {"balance_factor": -1}}`, "load.balance_factor"},
		{"weight negative", `{"load": {"balance_factor": 1.2, "spill_cost_weight": -0.5}}`, "load.spill_cost_weight: -0.5"},
		{"queued cost negative", `{"load": {"balance_factor": 1.2, "queued_request_cost": -1}}`, "load.queued_request_cost: -1"},
		{"queued cost fraction", `{"load": {"queued_request_cost": 1.5}}`, "load.queued_request_cost"},
		{"cold ratio above 1", `{"load": {"balance_factor": 1.2, "cold_cache_ratio": 1.5}}`, "load.cold_cache_ratio: 1.5"},
		{"factor wrong type", `{"load": {"balance_factor": "1.2"}}`, "load.balance_factor"},
	}
	runConfigCases(t, cases)
}

// TestLoadConfigYAML decodes through UnmarshalYAML with a JSON-backed unmarshal function
// (the core module has no YAML dependency; yaml.v3 calls it the same way).
func TestLoadConfigYAML(t *testing.T) {
	viaYAML := func(doc string) (affinity.Config, error) {
		var cfg affinity.Config
		err := cfg.UnmarshalYAML(func(v any) error { return json.Unmarshal([]byte(doc), v) })
		return cfg, err
	}
	cfg, err := viaYAML(`{"load": {"balance_factor": 1.25, "spill_cost_weight": 0.5}}`)
	require.NoError(t, err)
	assert.Equal(t, 1.25, cfg.Load.BalanceFactor)
	require.NotNil(t, cfg.Load.SpillCostWeight)
	assert.Equal(t, 0.5, *cfg.Load.SpillCostWeight)
	require.NoError(t, cfg.Validate())

	_, err = viaYAML(`{"load": {"queued_request_cost": 0.5}}`)
	require.ErrorIs(t, err, affinity.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "load.queued_request_cost")

	// Round trip: an absent block stays absent.
	out, err := json.Marshal(affinity.Config{})
	require.NoError(t, err)
	assert.NotContains(t, string(out), "load")
}
