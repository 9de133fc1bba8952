package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A reload that changes tenant scoping (on, off, header, api_key) changes every binding
// key: it logs one Warn saying sessions are placed again; a reload that keeps the keys
// (cache_salt alone, the header's case, nothing) logs none. A reload that changes the
// salt vLLM sees (cache_salt on or off, or its identity with cache_salt on) logs one
// Warn that salted requests' prefix caches go cold and sessions do not move. (Before: only "config
// reloaded", while every session missed on its next turn and some moved.)
func TestReloadTenantChangeWarns(t *testing.T) {
	off := gateway.TenantConfig{}
	hdr := gateway.TenantConfig{Header: "X-Tenant-ID"}
	salted := gateway.TenantConfig{Header: "X-Tenant-ID", CacheSalt: true}
	tests := []struct {
		name     string
		from, to gateway.TenantConfig
		warn     bool
		saltWarn bool // the prefix caches of salted requests go cold
	}{
		{"turned on", off, hdr, true, false},
		{"turned off", hdr, off, true, false},
		{"another header", hdr, gateway.TenantConfig{Header: "X-Org"}, true, false},
		{"api_key added", hdr, gateway.TenantConfig{Header: "X-Tenant-ID", APIKey: true}, true, false},
		{"cache_salt turned on", hdr, salted, false, true},
		{"cache_salt turned off", salted, hdr, false, true},
		{"api_key added with cache_salt on", salted, gateway.TenantConfig{Header: "X-Tenant-ID", APIKey: true, CacheSalt: true}, true, true},
		{"salted, unchanged", salted, salted, false, false},
		{"header case only", hdr, gateway.TenantConfig{Header: "x-tenant-id"}, false, false},
		{"unchanged on", hdr, hdr, false, false},
		{"unchanged off", off, off, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logger, logs := captureLogs()
			g, _ := testGateway(t, "", gateway.WithLogger(logger))
			cfg := g.Config()
			cfg.Tenant = tt.from
			require.NoError(t, g.Reload(cfg))
			before := strings.Count(logs.String(), "tenant scoping changed")
			saltBefore := strings.Count(logs.String(), "tenant cache_salt changed")
			cfg.Tenant = tt.to
			require.NoError(t, g.Reload(cfg))
			got := strings.Count(logs.String(), "tenant scoping changed") - before
			if tt.saltWarn {
				assert.Equal(t, 1, strings.Count(logs.String(), "tenant cache_salt changed")-saltBefore, logs.String())
				assert.Contains(t, logs.String(), `"level":"WARN","msg":"tenant cache_salt changed`)
				assert.Contains(t, logs.String(), "sessions do not move")
			} else {
				assert.Zero(t, strings.Count(logs.String(), "tenant cache_salt changed")-saltBefore, logs.String())
			}
			if !tt.warn {
				assert.Zero(t, got, logs.String())
				return
			}
			assert.Equal(t, 1, got, "one Warn at the reload")
			assert.Contains(t, logs.String(), `"level":"WARN","msg":"tenant scoping changed`)
			assert.Contains(t, logs.String(), "placed again")
		})
	}
}

// What the Warn says is what happens: after scoping is turned on, every session's next
// turn is a miss; turned off again within the TTL, each finds its old binding (a hit).
func TestReloadTenantOnReplacesSessions(t *testing.T) {
	g, _ := testGateway(t, "")
	const n = 30
	turn := func(i int) *http.Response {
		rec := do(t, g, "/v1/chat/completions", chatBody, map[string]string{"X-Session-ID": fmt.Sprintf("s%d", i)})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return rec.Result()
	}
	for i := range n {
		turn(i)
	}
	cfg := g.Config()
	on := cfg
	on.Tenant = gateway.TenantConfig{Header: "X-Tenant-ID"}
	require.NoError(t, g.Reload(on))
	for i := range n {
		assert.Equal(t, "false", turn(i).Header.Get(gateway.HeaderAffinityHit), "session %d after scoping on", i)
	}
	require.NoError(t, g.Reload(cfg))
	for i := range n {
		assert.Equal(t, "true", turn(i).Header.Get(gateway.HeaderAffinityHit), "session %d after scoping off", i)
	}
}
