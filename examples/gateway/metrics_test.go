package gateway_test

import (
	"errors"
	"io"
	"log/slog"
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
	err := g.Reload(cfg)
	assert.ErrorIs(t, err, gateway.ErrReloadNeedsRestart)
	assert.ErrorContains(t, err, `metrics.exporter "prometheus" -> "otel"`, "the omitted key shows its default")

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

// brokenClient is a client connection that fails every body write (it went away).
type brokenClient struct{ *httptest.ResponseRecorder }

func (brokenClient) Write([]byte) (int, error) { return 0, errors.New("write: broken pipe") }

// A client whose connection fails while the response is written went away: client_closed,
// as when it leaves before any answer, not the class of the status already sent; nothing
// is logged above Debug.
func TestClientGoneOnWriteIsClientClosed(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {}\n\n")
	}))
	t.Cleanup(backend.Close)
	logs := &syncBuffer{}
	g, err := gateway.New(gateway.Config{Backends: []gateway.BackendConfig{{ID: "b0", URL: backend.URL}}},
		gateway.WithLogger(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("X-Session-ID", "s1")
	g.ServeHTTP(brokenClient{httptest.NewRecorder()}, req)

	mfs, err := g.Registry().Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == gateway.MetricRequests {
			for _, m := range mf.GetMetric() {
				if v := m.GetCounter().GetValue(); v > 0 {
					got[m.GetLabel()[0].GetValue()+"/"+m.GetLabel()[1].GetValue()] = v
				}
			}
		}
	}
	assert.Equal(t, map[string]float64{"client_closed/backend": 1}, got)
	assert.Empty(t, logs.String())
}
