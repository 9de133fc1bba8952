package extproc_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/agentserve/sessionaffinity/examples/extproc"
)

// find walks a decoded YAML tree and returns every map that has key == value.
func find(node any, key, value string) []map[string]any {
	var out []map[string]any
	switch n := node.(type) {
	case map[string]any:
		if v, ok := n[key]; ok && v == value {
			out = append(out, n)
		}
		for _, v := range n {
			out = append(out, find(v, key, value)...)
		}
	case []any:
		for _, v := range n {
			out = append(out, find(v, key, value)...)
		}
	}
	return out
}

func path(t *testing.T, m map[string]any, keys ...string) any {
	t.Helper()
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		require.True(t, ok, "at %q: not a map", k)
		cur, ok = mm[k]
		require.True(t, ok, "missing key %q", k)
	}
	return cur
}

// The documented Envoy config parses and wires the ext_proc filter to the picker's
// cluster, the EPP headers and the ORIGINAL_DST inference pool.
func TestEnvoyConfig(t *testing.T) {
	data, err := os.ReadFile("envoy.yaml")
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal(data, &cfg))

	filters := find(cfg, "name", "envoy.filters.http.ext_proc")
	require.Len(t, filters, 1)
	f := filters[0]
	assert.Equal(t, "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor", path(t, f, "typed_config", "@type"))
	eppCluster := path(t, f, "typed_config", "grpc_service", "envoy_grpc", "cluster_name").(string)
	mode := path(t, f, "typed_config", "processing_mode").(map[string]any)
	assert.Equal(t, "FULL_DUPLEX_STREAMED", mode["request_body_mode"])
	assert.Equal(t, "FULL_DUPLEX_STREAMED", mode["response_body_mode"])
	assert.Equal(t, "SEND", mode["request_header_mode"])
	assert.Equal(t, "SEND", mode["response_header_mode"])
	assert.Equal(t, false, path(t, f, "typed_config", "failure_mode_allow"))
	assert.Contains(t, path(t, f, "typed_config", "metadata_options", "receiving_namespaces", "untyped"), extproc.MetadataNamespace)
	fwd := path(t, f, "typed_config", "metadata_options", "forwarding_namespaces", "untyped")
	assert.Contains(t, fwd, extproc.MetadataNamespace)
	assert.Contains(t, fwd, extproc.SubsetNamespace)

	// The ext_proc filter runs before the router.
	chains := find(cfg, "name", "envoy.filters.network.http_connection_manager")
	require.Len(t, chains, 1)
	hf := path(t, chains[0], "typed_config", "http_filters").([]any)
	require.Len(t, hf, 2)
	assert.Equal(t, "envoy.filters.http.ext_proc", hf[0].(map[string]any)["name"])
	assert.Equal(t, "envoy.filters.http.router", hf[1].(map[string]any)["name"])
	// Paths are normalized before routing; encoded slashes are kept (SDKs send %2F in
	// model IDs) and checked by the picker (docs/gateway.md, Request paths).
	hcm := path(t, chains[0], "typed_config").(map[string]any)
	assert.Equal(t, true, hcm["normalize_path"])
	assert.Equal(t, true, hcm["merge_slashes"])
	assert.Equal(t, "KEEP_UNCHANGED", hcm["path_with_escaped_slashes_action"])

	clusters := path(t, cfg, "static_resources", "clusters").([]any)
	byName := map[string]map[string]any{}
	for _, c := range clusters {
		m := c.(map[string]any)
		byName[m["name"].(string)] = m
	}
	epp, ok := byName[eppCluster]
	require.True(t, ok, "the ext_proc filter's cluster %q exists", eppCluster)
	assert.NotNil(t, path(t, epp, "typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
		"explicit_http_config", "http2_protocol_options"), "gRPC needs HTTP/2")
	assert.Equal(t, extproc.HealthExtProc, path(t, epp, "health_checks").([]any)[0].(map[string]any)["grpc_health_check"].(map[string]any)["service_name"])
	assert.Contains(t, string(data), "port_value: 9002", "the picker's default -grpc port")

	routes := find(cfg, "cluster", "inference_pool")
	require.NotEmpty(t, routes, "the route sends to the inference pool")
	pool := byName["inference_pool"]
	require.NotNil(t, pool)
	assert.Equal(t, "ORIGINAL_DST", pool["type"])
	assert.Equal(t, "CLUSTER_PROVIDED", pool["lb_policy"])
	assert.Equal(t, true, path(t, pool, "original_dst_lb_config", "use_http_header"))
	assert.Equal(t, extproc.HeaderDestination, path(t, pool, "original_dst_lb_config", "http_header_name"))
}
