package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// The hardening blocks: defaults when omitted, a matchable error for each bad value.
func TestHardeningConfig(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte(minimal))
	require.NoError(t, err)
	assert.Equal(t, gateway.TimeoutsConfig{
		DialSeconds: 5, ResponseHeaderSeconds: 300, StreamIdleSeconds: 60, BackendIdleConnSeconds: 4,
		ReadHeaderSeconds: 10, ReadBodySeconds: 60, ClientIdleSeconds: 60, ClientWriteSeconds: 60,
	}, cfg.Timeouts)
	assert.Equal(t, gateway.LimitsConfig{MaxInflightBytes: 256 << 20, MaxInflightRequests: 1024,
		RetryAfterSeconds: 1, MaxHeaderBytes: 64 << 10, MaxConnections: 4096}, cfg.Limits)
	assert.Equal(t, gateway.OutlierConfig{Enabled: new(true), ConsecutiveConnectFailures: 3, Consecutive5xx: 5,
		WindowSeconds: 30, BaseEjectionSeconds: 30, MaxEjectionSeconds: 300, MaxEjectionPercent: 50}, cfg.OutlierDetection)
	assert.Less(t, cfg.Timeouts.BackendIdleConnSeconds, 5.0, "below vLLM/uvicorn's 5 s keep-alive")

	off, err := gateway.ParseConfig([]byte(minimal + "health: {enabled: false}\n"))
	require.NoError(t, err)
	assert.Equal(t, new(false), off.Health.Enabled)

	for _, tt := range []struct {
		yaml string
		want error
	}{
		{"timeouts: {dial_seconds: -1}", gateway.ErrTimeoutConfig},
		{"timeouts: {response_header_seconds: .nan}", gateway.ErrTimeoutConfig},
		{"timeouts: {read_body_seconds: .inf}", gateway.ErrTimeoutConfig},
		{"limits: {max_inflight_bytes: -5}", gateway.ErrLimitsConfig},
		{"limits: {max_inflight_bytes: 1024}", gateway.ErrLimitsConfig}, // below max_body_bytes
		{"limits: {max_inflight_requests: -1}", gateway.ErrLimitsConfig},
		{"limits: {max_connections: -1}", gateway.ErrLimitsConfig},
		{"outlier_detection: {consecutive_5xx: -1}", gateway.ErrOutlierConfig},
		{"outlier_detection: {max_ejection_percent: 101}", gateway.ErrOutlierConfig},
		{"outlier_detection: {base_ejection_seconds: 60, max_ejection_seconds: 30}", gateway.ErrOutlierConfig},
		{"outlier_detection: {window_seconds: -2}", gateway.ErrOutlierConfig},
	} {
		t.Run(tt.yaml, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte(minimal + tt.yaml + "\n"))
			assert.ErrorIs(t, err, tt.want)
			assert.ErrorIs(t, err, gateway.ErrInvalidConfig)
		})
	}
}

// A bad limits value is reported alone, with its key, like the timeouts: not a list of
// all five values.
// Each message says what is allowed and what 0 means, with the default's value.
func TestLimitsErrorNamesTheKey(t *testing.T) {
	keys := []string{"max_inflight_bytes", "max_inflight_requests", "retry_after_seconds", "max_header_bytes", "max_connections"}
	want := map[string]string{
		"max_inflight_bytes":    "limits.max_inflight_bytes: -7: must be > 0 (0 or omitted: the default, 268435456)",
		"max_inflight_requests": "limits.max_inflight_requests: -7: must be > 0 (0 or omitted: the default, 1024)",
		"retry_after_seconds":   "limits.retry_after_seconds: -7: must be whole seconds, 1..1e+06 (0 or omitted: the default, 1)",
		"max_header_bytes":      "limits.max_header_bytes: -7: must be > 0 (0 or omitted: the default, 65536)",
		"max_connections":       "limits.max_connections: -7: must be > 0 (0 or omitted: the default, 4096)",
	}
	for _, key := range keys {
		t.Run(key, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte(minimal + "limits: {" + key + ": -7}\n"))
			require.ErrorIs(t, err, gateway.ErrLimitsConfig)
			assert.True(t, strings.HasSuffix(err.Error(), want[key]), "%v", err)
			for _, other := range keys {
				if other != key {
					assert.NotContains(t, err.Error(), other)
				}
			}
		})
	}
}

// Settings the listener, the server or the transport were built with need a restart; the
// other hardening keys reload in place.
func TestReloadHardening(t *testing.T) {
	g, err := gateway.New(gateway.Config{Backends: []gateway.BackendConfig{{ID: "a", URL: "http://127.0.0.1:9"}}})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	next := g.Config()
	next.Timeouts.ReadHeaderSeconds = 3
	assert.ErrorIs(t, g.Reload(next), gateway.ErrReloadNeedsRestart)
	next = g.Config()
	next.Limits.MaxConnections = 10
	assert.ErrorIs(t, g.Reload(next), gateway.ErrReloadNeedsRestart)
	next = g.Config()
	next.Timeouts.ResponseHeaderSeconds = 30
	next.Limits.MaxInflightRequests = 7
	next.OutlierDetection.Consecutive5xx = 2
	require.NoError(t, g.Reload(next))
	assert.Equal(t, int64(7), g.Config().Limits.MaxInflightRequests)
	assert.Equal(t, 2, g.Config().OutlierDetection.Consecutive5xx)
}

// A reload that changes several restart-only settings names them all in one error, and
// applies nothing, not even the settings that could change in place (tester52: one change
// named per attempt, the valid TTL change dropped each time without a word).
func TestReloadNeedsRestartListsEveryChange(t *testing.T) {
	g, err := gateway.New(gateway.Config{Backends: []gateway.BackendConfig{{ID: "a", URL: "http://127.0.0.1:9"}}})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	before := g.Config()
	next := before
	next.Server = gateway.ServerDirect // New's default is nethttp
	next.Timeouts.DialSeconds = 7
	next.Limits.MaxConnections = 10
	next.Affinity.StickyTTLSeconds = affinity.TTLSeconds(3600)
	err = g.Reload(next)
	require.ErrorIs(t, err, gateway.ErrReloadNeedsRestart)
	assert.EqualError(t, err, `gateway: config change needs a restart: server "nethttp" -> "direct"; `+
		"timeouts.dial_seconds 5 -> 7; limits.max_connections 4096 -> 10 (nothing of this reload was applied; "+
		"restart to change these, or revert them to reload the rest)")
	assert.Equal(t, before, g.Config())
	assert.Equal(t, 1800*time.Second, g.Scheduler().Table().TTL(""))
}
