package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Both exporters serve the affinity counters on /metrics under the same Prometheus names.
func TestMetricsExporters(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(backend.Close)

	for _, tt := range []struct {
		exporter string
		hits     *regexp.Regexp
		misses   *regexp.Regexp
		bindings *regexp.Regexp
	}{
		{"", regexp.MustCompile(`(?m)^agentserve_affinity_hits_total\{tier="default"\} 2$`),
			regexp.MustCompile(`(?m)^agentserve_affinity_misses_total\{tier="default"\} 1$`),
			regexp.MustCompile(`(?m)^agentserve_affinity_bindings 1$`)},
		{"prometheus", regexp.MustCompile(`(?m)^agentserve_affinity_hits_total\{tier="default"\} 2$`),
			regexp.MustCompile(`(?m)^agentserve_affinity_misses_total\{tier="default"\} 1$`),
			regexp.MustCompile(`(?m)^agentserve_affinity_bindings 1$`)},
		// The OTel Prometheus exporter adds the scope labels and the unit-free _total suffix.
		{"otel", regexp.MustCompile(`(?m)^agentserve_affinity_hits_total\{[^}]*tier="default"[^}]*\} 2$`),
			regexp.MustCompile(`(?m)^agentserve_affinity_misses_total\{[^}]*tier="default"[^}]*\} 1$`),
			regexp.MustCompile(`(?m)^agentserve_affinity_bindings\{[^}]*otel_scope_name="github.com/agentserve/sessionaffinity/metrics/otel"[^}]*\} 1$`)},
	} {
		t.Run("exporter="+tt.exporter, func(t *testing.T) {
			yaml := "backends:\n  - {id: b0, url: \"" + backend.URL + "\"}\n"
			if tt.exporter != "" {
				yaml += "metrics: {exporter: " + tt.exporter + "}\n"
			}
			cfg, err := gateway.ParseConfig([]byte(yaml))
			require.NoError(t, err)
			g, err := gateway.New(cfg)
			require.NoError(t, err)
			t.Cleanup(g.Close)
			for range 3 {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
				req.Header.Set("X-Session-ID", "s1")
				rec := httptest.NewRecorder()
				g.ServeHTTP(rec, req)
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			body, _ := io.ReadAll(rec.Body)
			assert.Regexp(t, tt.hits, string(body))
			assert.Regexp(t, tt.misses, string(body))
			assert.Regexp(t, tt.bindings, string(body))
			assert.NotContains(t, string(body), "s1\"", "no session ID in any label")
		})
	}
}

func TestMetricsExporterConfig(t *testing.T) {
	base := "backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n"
	_, err := gateway.ParseConfig([]byte(base + "metrics: {exporter: statsd}\n"))
	assert.ErrorIs(t, err, gateway.ErrMetricsExporter)
	assert.ErrorIs(t, err, gateway.ErrInvalidConfig)
	_, err = gateway.ParseConfig([]byte(base + "metrics: {exporter: otel}\n"))
	assert.NoError(t, err)
}

// The exporter cannot change in place; tenant settings can.
func TestReloadMetricsAndTenant(t *testing.T) {
	g, _ := testGateway(t, "")
	cfg := g.Config()
	cfg.Metrics.Exporter = gateway.ExporterOTel
	assert.ErrorIs(t, g.Reload(cfg), gateway.ErrReloadNeedsRestart)

	hdr := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + key, "X-Session-ID": "s"}
	}
	do(t, g, chat, chatBody, hdr("k1"))
	rec := do(t, g, chat, chatBody, hdr("k2"))
	assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit), "no tenant scoping yet: one binding")
	cfg = g.Config()
	cfg.Tenant = gateway.TenantConfig{APIKey: true}
	require.NoError(t, g.Reload(cfg))
	do(t, g, chat, chatBody, hdr("k1"))
	rec = do(t, g, chat, chatBody, hdr("k2"))
	assert.Equal(t, "false", rec.Header().Get(gateway.HeaderAffinityHit), "after the reload each key has its own binding")
}
