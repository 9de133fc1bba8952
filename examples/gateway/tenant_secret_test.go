package gateway_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// New warns about a missing tenant secret and about one shorter than
// MinTenantSecretBytes (tester46: a 1-byte secret started silently), once, naming the
// variable and never the value; a long enough secret, or no tenant scoping, starts
// without either warning.
func TestTenantSecretWarnings(t *testing.T) {
	const env = "GATEWAY_TEST_TENANT_SECRET"
	tests := []struct {
		name   string
		tenant string
		secret string
		want   string // the warning's text, "" for none
	}{
		{"unset", "tenant: {header: X-Tenant-ID, secret_env: " + env + "}\n", "", "tenant scoping without a secret"},
		{"one byte", "tenant: {header: X-Tenant-ID, secret_env: " + env + "}\n", "x", "tenant secret is short"},
		{"31 bytes", "tenant: {header: X-Tenant-ID, secret_env: " + env + "}\n", strings.Repeat("k", 31), "tenant secret is short"},
		{"32 bytes", "tenant: {header: X-Tenant-ID, secret_env: " + env + "}\n", strings.Repeat("k", 32), ""},
		{"no scoping", "", "x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(env, tt.secret)
			cfg, err := gateway.ParseConfig([]byte(minimal + tt.tenant))
			require.NoError(t, err)
			log, logs := captureLogs()
			g, err := gateway.New(cfg, gateway.WithLogger(log))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			out := logs.String()
			for _, w := range []string{"tenant scoping without a secret", "tenant secret is short"} {
				if w == tt.want {
					assert.Equal(t, 1, strings.Count(out, w), "one %q", w)
				} else {
					assert.NotContains(t, out, w)
				}
			}
			if len(tt.secret) >= 31 { // distinctive enough to look for
				assert.NotContains(t, out, tt.secret, "the secret is never logged")
			}
		})
	}
}
