package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// The tier header value "default" (the metric label of the empty tier) names the default
// tier "", also over model_tiers, unless the config has a tier literally named "default":
// then that tier. It is matched exactly, after trimming spaces like every tier value.
func TestTierHeaderDefault(t *testing.T) {
	const (
		backends = "backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n  - {id: g0, url: \"http://127.0.0.1:9\", tier: gold}\n"
		twoTiers = backends + "model_tiers: {m: gold}\n"
	)
	for _, tt := range []struct {
		name, yaml, header, model string
		tier, backend             string // want; backend "" with code: refused
		code                      string
	}{
		{"default names the empty tier", twoTiers, "default", "x", "", "b0", ""},
		{"default overrides model_tiers", twoTiers, "default", "m", "", "b0", ""},
		{"spaces trimmed", twoTiers, " default ", "m", "", "b0", ""},
		{"no header: model_tiers", twoTiers, "", "m", "gold", "g0", ""},
		{"a configured tier by name", twoTiers, "gold", "x", "gold", "g0", ""},
		{"matched exactly: Default is unknown", twoTiers, "Default", "x", "", "", "unknown_tier"},
		{"defaults is unknown", twoTiers, "defaults", "x", "", "", "unknown_tier"},
		{"a backend tier named default wins", backends + "  - {id: d0, url: \"http://127.0.0.1:9\", tier: default}\nmodel_tiers: {m: gold}\n", "default", "x", "default", "d0", ""},
		{"an affinity.tiers key named default wins", twoTiers + "affinity: {tiers: {default: {sticky_ttl_seconds: 60}}}\n", "default", "m", "default", "", ""},
		{"a model_tiers value named default wins", "backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\nmodel_tiers: {m: default}\n", "default", "x", "default", "b0", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := gateway.ParseConfig([]byte(tt.yaml))
			require.NoError(t, err)
			g, err := gateway.New(cfg)
			require.NoError(t, err)
			t.Cleanup(g.Close)
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			req.Header.Set("X-Session-ID", "s")
			if tt.header != "" {
				req.Header.Set("X-Agent-Serve-Tier", tt.header)
			}
			d, err := g.Decide(req, []byte(`{"model":"`+tt.model+`"}`), nil)
			if tt.code != "" {
				var re *gateway.RequestError
				require.ErrorAs(t, err, &re)
				assert.Equal(t, http.StatusBadRequest, re.Status)
				assert.Equal(t, tt.code, re.Code)
				return
			}
			require.NoError(t, err)
			defer d.Done()
			assert.Equal(t, tt.tier, d.Tier)
			if tt.backend != "" {
				assert.Equal(t, tt.backend, d.BackendID)
			}
		})
	}
}

// The proxy path answers the request (the report: 400 unknown_tier for "default").
func TestTierHeaderDefaultServes(t *testing.T) {
	g, _ := testGateway(t, "")
	rec := do(t, g, "/v1/chat/completions", `{"model":"x"}`, map[string]string{"X-Session-ID": "s", "X-Agent-Serve-Tier": "default"})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}
