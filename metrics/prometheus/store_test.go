package prometheus_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	promaffinity "github.com/agentserve/sessionaffinity/metrics/prometheus"

	"github.com/agentserve/sessionaffinity/metrics"
)

func TestStoreErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := promaffinity.New(reg)
	require.NoError(t, err)
	var sr metrics.StoreRecorder = r
	sr.StoreError(metrics.StoreOpClaim)
	sr.StoreError(metrics.StoreOpClaim)
	sr.StoreError(metrics.StoreOpRefresh)
	sr.StoreError("bogus")
	want := `
# HELP agentserve_affinity_store_errors_total Failed calls to the shared binding store (Redis): request-path calls (each one decided from the local table instead), background refreshes and the subscription; plus calls that succeeded but repaired a key holding no binding (a wrong Redis type or an over-long value: answered by Redis, the key overwritten or deleted), by op.
# TYPE agentserve_affinity_store_errors_total counter
agentserve_affinity_store_errors_total{op="claim"} 2
agentserve_affinity_store_errors_total{op="forget"} 0
agentserve_affinity_store_errors_total{op="other"} 1
agentserve_affinity_store_errors_total{op="rebind"} 0
agentserve_affinity_store_errors_total{op="refresh"} 1
agentserve_affinity_store_errors_total{op="watch"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), promaffinity.MetricStoreErrors))
}
