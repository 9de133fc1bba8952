package gateway_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Every integer key of the gateway's configuration refuses a number with a fractional
// part (yaml.v3 alone truncates it: max_body_bytes: 10.9 became 10, a threshold of 0.5
// became 0 and so the default) with an error naming the key and its line, and accepts a
// whole number written as a float (1e3, 10.0) as yaml.v3 decodes it.
func TestParseConfigIntegerKeysRefuseFractions(t *testing.T) {
	keys := []struct {
		yaml string // a YAML document with %s where the value goes
		key  string
		want error
	}{
		{"max_body_bytes: %s", "max_body_bytes", gateway.ErrMaxBodyBytes},
		{"limits: {max_inflight_bytes: %s}\nmax_body_bytes: 5", "limits.max_inflight_bytes", gateway.ErrLimitsConfig},
		{"limits: {max_inflight_requests: %s}", "limits.max_inflight_requests", gateway.ErrLimitsConfig},
		{"limits: {retry_after_seconds: %s}", "limits.retry_after_seconds", gateway.ErrLimitsConfig},
		{"limits: {max_header_bytes: %s}", "limits.max_header_bytes", gateway.ErrLimitsConfig},
		{"limits: {max_connections: %s}", "limits.max_connections", gateway.ErrLimitsConfig},
		{"health: {failure_threshold: %s}", "health.failure_threshold", gateway.ErrHealthConfig},
		{"health: {success_threshold: %s}", "health.success_threshold", gateway.ErrHealthConfig},
		{"outlier_detection: {consecutive_connect_failures: %s}", "outlier_detection.consecutive_connect_failures", gateway.ErrOutlierConfig},
		{"outlier_detection: {consecutive_5xx: %s}", "outlier_detection.consecutive_5xx", gateway.ErrOutlierConfig},
		{"outlier_detection: {max_ejection_percent: %s}", "outlier_detection.max_ejection_percent", gateway.ErrOutlierConfig},
		{"store: {address: '127.0.0.1:6379', db: %s}", "store.db", gateway.ErrStoreConfig},
	}
	for _, k := range keys {
		for _, v := range []string{"0.5", "10.9", "1e-7", "-0.5"} {
			t.Run(k.key+"="+v, func(t *testing.T) {
				doc := "# first line\n" + fmt.Sprintf(k.yaml, v) + "\n" + minimal
				_, err := gateway.ParseConfig([]byte(doc))
				require.Error(t, err)
				assert.ErrorIs(t, err, gateway.ErrInvalidConfig)
				assert.ErrorIs(t, err, k.want)
				assert.Contains(t, err.Error(), "line 2: "+k.key+": "+v+" is not a whole number")
			})
		}
		for _, v := range []string{"10", "1e1", "10.0"} {
			t.Run(k.key+"="+v, func(t *testing.T) {
				_, err := gateway.ParseConfig([]byte(fmt.Sprintf(k.yaml, v) + "\n" + minimal))
				require.NoError(t, err)
			})
		}
	}
	cfg, err := gateway.ParseConfig([]byte("max_body_bytes: 1e3\nlimits: {max_inflight_bytes: 2e3, max_connections: 10.0}\n" + minimal))
	require.NoError(t, err)
	assert.Equal(t, int64(1000), cfg.MaxBodyBytes)
	assert.Equal(t, int64(2000), cfg.Limits.MaxInflightBytes)
	assert.Equal(t, 10, cfg.Limits.MaxConnections)
}

// The *_seconds keys are floats: a fraction is their normal value, not an error.
func TestParseConfigSecondsKeysStayFractional(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte("health: {interval_seconds: 0.5, failure_threshold: 2}\n" +
		"outlier_detection: {window_seconds: 2.5}\nsweep_seconds: 1.5\n" + minimal))
	require.NoError(t, err)
	assert.Equal(t, 0.5, cfg.Health.IntervalSeconds)
	assert.Equal(t, 2, cfg.Health.FailureThreshold)
	assert.Equal(t, 2.5, cfg.OutlierDetection.WindowSeconds)
}
