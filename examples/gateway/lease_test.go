package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// ReportLoads reads the vLLM queue gauges of each backend's /metrics into the scheduler;
// a backend without them (or unreachable) has its report cleared.
func TestReportLoads(t *testing.T) {
	page := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 7
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.42
`
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_, _ = w.Write([]byte(page))
			return
		}
		http.NotFound(w, r)
	}))
	defer vllm.Close()
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()

	g, err := gateway.New(gateway.Config{Backends: []gateway.BackendConfig{
		{ID: "busy", URL: vllm.URL}, {ID: "plain", URL: other.URL}}})
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Scheduler().ReportLoad("plain", affinity.BackendLoad{Waiting: 5}))

	g.ReportLoads(context.Background())
	assert.Equal(t, affinity.LoadSnapshot{Reported: 10, KVCache: 0.42}, g.Scheduler().Load("busy"))
	assert.Equal(t, affinity.LoadSnapshot{}, g.Scheduler().Load("plain"), "no gauges: report cleared")
}

func TestLoadReportSecondsValidated(t *testing.T) {
	_, err := gateway.New(gateway.Config{Backends: []gateway.BackendConfig{{ID: "a", URL: "http://h:1"}}, LoadReportSeconds: -1})
	assert.ErrorIs(t, err, gateway.ErrLoadReportInterval)
	assert.ErrorIs(t, err, gateway.ErrInvalidConfig)
}
