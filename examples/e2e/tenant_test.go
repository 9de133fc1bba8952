package e2e_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// With tenant.cache_salt the backend's prefix cache is not shared across tenants: tenant
// B sending tenant A's exact prompt (and session ID) gets no cached tokens. Without the
// salt it would (the control), which is the timing side channel the salt closes.
func TestTenantCacheSaltIsolatesPrefixCache(t *testing.T) {
	body, err := json.Marshal(map[string]any{"model": "fake-model", "max_tokens": 8, "messages": []msg{
		{Role: "system", Content: string(bytes.Repeat([]byte("a long shared system prompt "), 64))},
		{Role: "user", Content: "hello"}}})
	require.NoError(t, err)
	send := func(c *cluster, key string) chatResult {
		t.Helper()
		r := c.post("/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key, "X-Session-ID": "same-id"}, body)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		return r
	}
	for _, tt := range []struct {
		name string
		salt bool
	}{{"salted", true}, {"control: no salt", false}} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, 1, func(cfg *gateway.Config) {
				cfg.Tenant = gateway.TenantConfig{APIKey: true, CacheSalt: tt.salt}
			})
			assert.Zero(t, send(c, "sk-tenant-a").cached, "cold")
			assert.Positive(t, send(c, "sk-tenant-a").cached, "tenant A's own prefix is cached")
			b := send(c, "sk-tenant-b")
			assert.False(t, b.hit, "tenant B does not hit A's binding")
			if tt.salt {
				assert.Zero(t, b.cached, "tenant B does not reuse A's cached prefix")
			} else {
				assert.Positive(t, b.cached, "without the salt B would reuse A's prefix")
			}
		})
	}
}
