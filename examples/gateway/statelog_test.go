package gateway_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Every "backend state change" line is logged at the level of the state reached: Warn
// for Down (a failed active check, a backend added back while its check was down, an
// outlier ejection), Info for Healthy or Draining (a recovery, a drain or undrain, the
// end of an ejection). Before, an active check's recovery and a reload's mark-up were
// Warn like a failure (tester25 #5).
func TestStateChangeLogLevels(t *testing.T) {
	const hc = "health: {enabled: true, failure_threshold: 1, success_threshold: 1}\n"
	ids := []string{"b0", "b1"}
	// withFlaky builds a gateway whose b1 answers its health check only while healthy.
	withFlaky := func(t *testing.T, logs *records, healthy *atomic.Bool, edit func(*gateway.Config)) (*gateway.Gateway, []string) {
		urls := append(jsonBackends(t, 1), probedBackend(t, healthy, nil))
		cfg := yamlConfig(t, urls, ids, []float64{1, 1}, hc)
		edit(&cfg)
		g, err := gateway.New(cfg, gateway.WithLogger(slog.New(logs)))
		require.NoError(t, err)
		t.Cleanup(g.Close)
		return g, urls
	}
	ctx := context.Background()
	noEdit := func(*gateway.Config) {}
	drainB1 := func(c *gateway.Config) { c.Backends[1].Drain = true }
	tests := []struct {
		name string
		run  func(t *testing.T, logs *records)
		want []string // "from->to LEVEL" of each line, in order
	}{
		{"active check: down and back", func(t *testing.T, logs *records) {
			var healthy atomic.Bool
			g, _ := withFlaky(t, logs, &healthy, noEdit)
			g.ProbeOnce(ctx)
			healthy.Store(true)
			g.ProbeOnce(ctx)
		}, []string{"healthy->down WARN", "down->healthy INFO"}},
		{"active check of a drained backend", func(t *testing.T, logs *records) {
			var healthy atomic.Bool
			g, _ := withFlaky(t, logs, &healthy, drainB1)
			g.ProbeOnce(ctx)
			healthy.Store(true)
			g.ProbeOnce(ctx)
		}, []string{"healthy->draining INFO", "draining->down WARN", "down->draining INFO"}},
		{"drain and undrain by reload", func(t *testing.T, logs *records) {
			var healthy atomic.Bool
			healthy.Store(true)
			g, urls := withFlaky(t, logs, &healthy, noEdit)
			cfg := yamlConfig(t, urls, ids, []float64{1, 1}, hc)
			drainB1(&cfg)
			require.NoError(t, g.Reload(cfg))
			require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1}, hc)))
		}, []string{"healthy->draining INFO", "draining->healthy INFO"}},
		{"reload turning health checks off marks a Down backend up", func(t *testing.T, logs *records) {
			var healthy atomic.Bool
			g, urls := withFlaky(t, logs, &healthy, noEdit)
			g.ProbeOnce(ctx)
			require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1}, "health: {enabled: false}\n")))
		}, []string{"healthy->down WARN", "down->healthy INFO"}},
		{"reload adding back a backend removed while down", func(t *testing.T, logs *records) {
			var healthy atomic.Bool
			g, urls := withFlaky(t, logs, &healthy, noEdit)
			g.ProbeOnce(ctx)
			require.NoError(t, g.Reload(yamlConfig(t, urls[:1], ids[:1], []float64{1}, hc)))
			require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1}, hc)))
		}, []string{"healthy->down WARN", "healthy->down WARN"}},
		{"outlier ejection and its end", func(t *testing.T, logs *records) {
			clk := newTestClock()
			rt := &scripted{steps: []step{{err: errRefused}}}
			g, err := gateway.New(gateway.Config{
				Backends:            []gateway.BackendConfig{{ID: "a", URL: "http://a.test"}, {ID: "b", URL: "http://b.test"}},
				Health:              gateway.HealthConfig{Enabled: new(false)},
				RetryOnConnectError: new(false),
				OutlierDetection:    gateway.OutlierConfig{ConsecutiveConnectFailures: 1, BaseEjectionSeconds: 10},
			}, gateway.WithTransport(rt), gateway.WithClock(clk), gateway.WithLogger(slog.New(logs)))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
			req.Header.Set("X-Session-ID", "s")
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			require.Equal(t, http.StatusBadGateway, rec.Code)
			require.Len(t, g.PassivelyDown(), 1)
			clk.Advance(10 * time.Second)
			require.Len(t, g.RecheckPassive(ctx), 1)
		}, []string{"healthy->down (ejected) WARN", "down (ejected)->healthy INFO"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &records{}
			tt.run(t, logs)
			assert.Equal(t, tt.want, logs.stateChanges())
		})
	}
}

// stateChanges returns each "backend state change" record as "from->to LEVEL".
func (h *records) stateChanges() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Message != "backend state change" {
			continue
		}
		var from, to string
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "from":
				from = a.Value.String()
			case "to":
				to = a.Value.String()
			}
			return true
		})
		out = append(out, from+"->"+to+" "+r.Level.String())
	}
	return out
}
