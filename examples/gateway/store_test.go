package gateway_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
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
		{"brace in prefix", "store: {address: 'h:6379', prefix: '{fleet}:'}", redisstore.ErrPrefix},
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

// storeGateway builds a gateway whose store: block points at addr (with extra keys),
// logging into a buffer; it returns New's result and the log.
func storeGateway(t *testing.T, addr, extra string) (*gateway.Gateway, string, error) {
	t.Helper()
	cfg, err := gateway.ParseConfig([]byte(minimal + "store: {address: '" + addr + "', dial_timeout_seconds: 0.3" + extra + "}\n"))
	require.NoError(t, err)
	var buf bytes.Buffer
	g, err := gateway.New(cfg, gateway.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if g != nil {
		t.Cleanup(g.Close)
	}
	return g, buf.String(), err
}

// TestStoreStartRejected: settings Redis refuses (a wrong password, no password, a db
// out of range) stop New with a configuration error naming the store keys.
func TestStoreStartRejected(t *testing.T) {
	t.Setenv("GATEWAY_TEST_REDIS_PASSWORD", "wrong")
	for _, tc := range []struct {
		name, extra, keys string
	}{
		{"wrong password", ", password_env: GATEWAY_TEST_REDIS_PASSWORD", "password_env"},
		{"no password", "", "password_env"},
		{"db out of range", ", db: 99", "db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			if tc.keys == "password_env" {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				require.NoError(t, c.ConfigSet(context.Background(), "requirepass", "sekrit").Err())
				require.NoError(t, c.Close())
			}
			g, _, err := storeGateway(t, srv.Addr(), tc.extra)
			require.Nil(t, g)
			require.ErrorIs(t, err, gateway.ErrInvalidConfig)
			require.ErrorIs(t, err, gateway.ErrStoreConfig)
			require.ErrorIs(t, err, redisstore.ErrRejected)
			require.Contains(t, err.Error(), "store: ")
			require.Contains(t, err.Error(), tc.keys)
		})
	}
}

// TestStoreStartUnreachable: nothing listening or a server that never answers: New
// succeeds (the gateway serves through a Redis outage) with one WARN line and without
// the "bindings shared" line; a reachable Redis logs that line and no WARN.
func TestStoreStartUnreachable(t *testing.T) {
	stopped := redistest.Start(t)
	stopped.Stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	require.NoError(t, err)
	defer ln.Close()
	up := redistest.Start(t)
	for _, tc := range []struct {
		name, addr string
		warn       bool
	}{
		{"nothing listening", stopped.Addr(), true},
		{"silent", ln.Addr().String(), true},
		{"up", up.Addr(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, log, err := storeGateway(t, tc.addr, "")
			require.NoError(t, err)
			require.NotNil(t, g.Store())
			if tc.warn {
				require.Equal(t, 1, strings.Count(log, "level=WARN"), log)
				require.Contains(t, log, "gateway: Redis unreachable at start")
				require.NotContains(t, log, "bindings shared on Redis")
				return
			}
			require.NotContains(t, log, "level=WARN")
			require.Contains(t, log, "bindings shared on Redis")
		})
	}
}

// TestStoreStartBounded: against a Redis that accepts connections and never answers (a
// hung or SIGSTOPped server), New logs "Redis unreachable at start" within
// store.dial_timeout_seconds, as docs/fleet.md says (plus a margin for a loaded test
// machine), not twice that (the store used to open its subscription's connection
// before the Ping, each waiting the dial timeout).
func TestStoreStartBounded(t *testing.T) {
	const dial = time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	require.NoError(t, err)
	defer ln.Close()
	cfg, err := gateway.ParseConfig([]byte(minimal + "store: {address: '" + ln.Addr().String() + "', dial_timeout_seconds: 1}\n"))
	require.NoError(t, err)
	var buf bytes.Buffer
	start := time.Now()
	g, err := gateway.New(cfg, gateway.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	took := time.Since(start)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	require.Contains(t, buf.String(), "gateway: Redis unreachable at start")
	require.Less(t, took, dial*19/10, "the start-up check took more than dial_timeout_seconds (the old code: twice it)")
}
