package gateway_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func TestParseConfigStore(t *testing.T) {
	t.Setenv("GATEWAY_TEST_REDIS_PASSWORD", "pw")
	cfg, err := gateway.ParseConfig([]byte(minimal + `
store:
  address: 127.0.0.1:6379
  password_env: GATEWAY_TEST_REDIS_PASSWORD
  prefix: "fleet-a:"
  timeout_seconds: 0.02
`))
	require.NoError(t, err)
	require.Equal(t, &redisstore.Config{Address: "127.0.0.1:6379", PasswordEnv: "GATEWAY_TEST_REDIS_PASSWORD", Prefix: "fleet-a:", TimeoutSeconds: 0.02}, cfg.Store)

	cfg, err = gateway.ParseConfig([]byte(minimal))
	require.NoError(t, err)
	require.Nil(t, cfg.Store, "no store: block, no store")
}

func TestParseConfigStoreErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       error
	}{
		{"no address", "store: {prefix: x}", redisstore.ErrAddress},
		{"bad address", "store: {address: redis}", redisstore.ErrAddress},
		{"password env unset", "store: {address: 'h:6379', password_env: GATEWAY_TEST_UNSET_VAR}", redisstore.ErrPasswordEnv},
		{"negative timeout", "store: {address: 'h:6379', timeout_seconds: -1}", redisstore.ErrTimeout},
		{"tls key without tls", "store: {address: 'h:6379', tls_server_name: r}", redisstore.ErrTLS},
		{"unknown key", "store: {address: 'h:6379', adress: x}", gateway.ErrUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte(minimal + tc.yaml + "\n"))
			require.ErrorIs(t, err, gateway.ErrInvalidConfig)
			require.ErrorIs(t, err, tc.want)
			if tc.want != gateway.ErrUnknownKey {
				require.ErrorIs(t, err, gateway.ErrStoreConfig)
				require.Contains(t, err.Error(), "store: ")
			}
		})
	}
}
