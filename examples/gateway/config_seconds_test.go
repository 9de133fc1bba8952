package gateway_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Every *_seconds key rejects values that overflow time.Duration (1e10 s became a
// negative timeout), round to nothing (1e-10 s cut every stream), are negative or not
// finite, and accepts the ends of its range; the error names the key.
func TestParseConfigSecondsRange(t *testing.T) {
	keys := []struct {
		yaml string // a YAML document with %s where the value goes
		key  string
		want error
	}{
		{"timeouts: {dial_seconds: %s}", "timeouts.dial_seconds", gateway.ErrTimeoutConfig},
		{"timeouts: {response_header_seconds: %s}", "timeouts.response_header_seconds", gateway.ErrTimeoutConfig},
		{"timeouts: {stream_idle_seconds: %s}", "timeouts.stream_idle_seconds", gateway.ErrTimeoutConfig},
		{"timeouts: {backend_idle_conn_seconds: %s}", "timeouts.backend_idle_conn_seconds", gateway.ErrTimeoutConfig},
		{"timeouts: {read_header_seconds: %s}", "timeouts.read_header_seconds", gateway.ErrTimeoutConfig},
		{"timeouts: {read_body_seconds: %s}", "timeouts.read_body_seconds", gateway.ErrTimeoutConfig},
		{"timeouts: {client_idle_seconds: %s}", "timeouts.client_idle_seconds", gateway.ErrTimeoutConfig},
		{"timeouts: {client_write_seconds: %s}", "timeouts.client_write_seconds", gateway.ErrTimeoutConfig},
		{"health: {interval_seconds: %s}", "health.interval_seconds", gateway.ErrHealthConfig},
		{"health: {timeout_seconds: %s}", "health.timeout_seconds", gateway.ErrHealthConfig},
		{"health: {passive_recheck_seconds: %s}", "health.passive_recheck_seconds", gateway.ErrPassiveRecheck},
		{"outlier_detection: {window_seconds: %s}", "outlier_detection.window_seconds", gateway.ErrOutlierConfig},
		{"outlier_detection: {base_ejection_seconds: %s, max_ejection_seconds: 1e6}", "outlier_detection.base_ejection_seconds", gateway.ErrOutlierConfig},
		{"outlier_detection: {max_ejection_seconds: %s, base_ejection_seconds: 0.001}", "outlier_detection.max_ejection_seconds", gateway.ErrOutlierConfig},
		{"sweep_seconds: %s", "sweep_seconds", gateway.ErrSweepInterval},
		{"drain_seconds: %s", "drain_seconds", gateway.ErrDrainTimeout},
		{"load_report_seconds: %s", "load_report_seconds", gateway.ErrLoadReportInterval},
	}
	values := []struct {
		v  string
		ok bool
	}{
		{"1e10", false}, {"1000001", false}, {"1e-10", false}, {"0.0009", false}, {"-1", false},
		{".inf", false}, {".nan", false}, {"1e6", true}, {"0.001", true}, {"2.5", true},
	}
	for _, k := range keys {
		for _, v := range values {
			t.Run(k.key+"="+v.v, func(t *testing.T) {
				_, err := gateway.ParseConfig([]byte(fmt.Sprintf(k.yaml, v.v) + "\n" + minimal))
				if v.ok {
					require.NoError(t, err)
					return
				}
				require.Error(t, err)
				assert.ErrorIs(t, err, gateway.ErrInvalidConfig)
				assert.ErrorIs(t, err, k.want)
				assert.Contains(t, err.Error(), k.key+": ")
				assert.Contains(t, err.Error(), "0.001..1e+06")
				// 0 is accepted by every key below, so the message says what it means:
				// "off" keys list it in the range, the others name their default.
				if k.key == "load_report_seconds" { // its 0 is "off", not a default
					assert.Regexp(t, `: must be a number of seconds, 0 or 0\.001\.\.1e\+06$`, err.Error())
				} else {
					assert.Regexp(t, `: must be a number of seconds, 0\.001\.\.1e\+06 \(0 or omitted: the default, [0-9.]+\)$`, err.Error())
				}
			})
		}
		// 0 is the default (or "off") for every key: accepted.
		_, err := gateway.ParseConfig([]byte(fmt.Sprintf(k.yaml, "0") + "\n" + minimal))
		assert.NoError(t, err, k.key)
	}
	_, err := gateway.ParseConfig([]byte("limits: {retry_after_seconds: 10000000}\n" + minimal))
	assert.ErrorIs(t, err, gateway.ErrLimitsConfig)
	assert.ErrorContains(t, err, "limits.retry_after_seconds: 10000000: must be whole seconds, 1..1e+06 (0 or omitted: the default, 1)")
}
