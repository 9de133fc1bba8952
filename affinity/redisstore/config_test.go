package redisstore_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
)

func TestConfigValidate(t *testing.T) {
	t.Setenv("REDISSTORE_TEST_PASSWORD", "s3cret")
	dir := t.TempDir()
	noPEM := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(noPEM, []byte("not a certificate"), 0o600))
	for _, tc := range []struct {
		name string
		cfg  redisstore.Config
		want error // nil: valid
	}{
		{"minimal", redisstore.Config{Address: "127.0.0.1:6379"}, nil},
		{"all", redisstore.Config{Address: "redis.internal:6380", Username: "gw", PasswordEnv: "REDISSTORE_TEST_PASSWORD",
			TLS: true, TLSServerName: "redis", Prefix: "fleet-a:", TimeoutSeconds: 0.02, RetryAfterSeconds: 5, DialTimeoutSeconds: 2}, nil},
		{"no address", redisstore.Config{}, redisstore.ErrAddress},
		{"no port", redisstore.Config{Address: "localhost"}, redisstore.ErrAddress},
		{"port 0", redisstore.Config{Address: "localhost:0"}, redisstore.ErrAddress},
		{"port too big", redisstore.Config{Address: "localhost:70000"}, redisstore.ErrAddress},
		{"password env unset", redisstore.Config{Address: "h:1", PasswordEnv: "REDISSTORE_TEST_UNSET"}, redisstore.ErrPasswordEnv},
		{"negative timeout", redisstore.Config{Address: "h:1", TimeoutSeconds: -1}, redisstore.ErrTimeout},
		{"NaN retry", redisstore.Config{Address: "h:1", RetryAfterSeconds: math.NaN()}, redisstore.ErrTimeout},
		{"Inf dial", redisstore.Config{Address: "h:1", DialTimeoutSeconds: math.Inf(1)}, redisstore.ErrTimeout},
		{"timeout under 1 ms", redisstore.Config{Address: "h:1", TimeoutSeconds: 1e-7}, redisstore.ErrTimeout},
		{"timeout rounding to 0 ns", redisstore.Config{Address: "h:1", TimeoutSeconds: 1e-12}, redisstore.ErrTimeout},
		{"retry under 1 ms", redisstore.Config{Address: "h:1", RetryAfterSeconds: 0.0009}, redisstore.ErrTimeout},
		{"dial over a day", redisstore.Config{Address: "h:1", DialTimeoutSeconds: 86401}, redisstore.ErrTimeout},
		{"ends of the range", redisstore.Config{Address: "h:1", TimeoutSeconds: 0.001, RetryAfterSeconds: 86400, DialTimeoutSeconds: 0.001}, nil},
		{"tls key without tls", redisstore.Config{Address: "h:1", TLSCAFile: noPEM}, redisstore.ErrTLS},
		{"ca file missing", redisstore.Config{Address: "h:1", TLS: true, TLSCAFile: filepath.Join(dir, "missing.pem")}, redisstore.ErrTLS},
		{"ca file without PEM", redisstore.Config{Address: "h:1", TLS: true, TLSCAFile: noPEM}, redisstore.ErrTLS},
		{"brace in prefix", redisstore.Config{Address: "h:1", Prefix: "{fleet}:"}, redisstore.ErrPrefix},
		{"closing brace in prefix", redisstore.Config{Address: "h:1", Prefix: "fleet}"}, redisstore.ErrPrefix},
		{"negative db", redisstore.Config{Address: "h:1", DB: -1}, redisstore.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, redisstore.ErrInvalidConfig)
			require.ErrorIs(t, err, tc.want)
			// The package's prefix once, not once per wrapped sentinel (tester36).
			require.Equal(t, 1, strings.Count(err.Error(), "redisstore:"), err.Error())
			require.Equal(t, 1, strings.Count(err.Error(), "invalid config"), err.Error())
			_, err = redisstore.New(tc.cfg)
			require.True(t, errors.Is(err, tc.want), "New: %v", err)
		})
	}
}

// A *_seconds error names the key, the range and the default that 0 stands for.
func TestConfigSecondsMessage(t *testing.T) {
	for _, tc := range []struct {
		cfg  redisstore.Config
		want string
	}{
		{redisstore.Config{Address: "h:1", TimeoutSeconds: -1},
			"redisstore: invalid config: bad timeout: timeout_seconds: -1: must be a number of seconds, 0.001..86400 (0 or omitted: the default, 0.05)"},
		{redisstore.Config{Address: "h:1", RetryAfterSeconds: 1e-7},
			"redisstore: invalid config: bad timeout: retry_after_seconds: 1e-07: must be a number of seconds, 0.001..86400 (0 or omitted: the default, 1)"},
		{redisstore.Config{Address: "h:1", DialTimeoutSeconds: math.NaN()},
			"redisstore: invalid config: bad timeout: dial_timeout_seconds: NaN: must be a number of seconds, 0.001..86400 (0 or omitted: the default, 1)"},
	} {
		require.EqualError(t, tc.cfg.Validate(), tc.want)
	}
}

func TestKey(t *testing.T) {
	st, err := redisstore.New(redisstore.Config{Address: "127.0.0.1:1", Prefix: "p:"})
	require.NoError(t, err)
	defer st.Close()
	require.Equal(t, "p:{0123456789abcdef}:00000000000000ff", st.Key(affinity.StoreKey{Session: 0x0123456789abcdef, Tier: 0xff}))
}

// TestRedisDownAtStart: a Store whose Redis never answers fails every call within the
// timeout with an error (the Scheduler then decides locally); New itself succeeds.
func TestRedisDownAtStart(t *testing.T) {
	st, err := redisstore.New(redisstore.Config{Address: "127.0.0.1:1", TimeoutSeconds: 0.05})
	require.NoError(t, err)
	defer st.Close()
	s, err := affinity.New(affinity.Config{}, st.SchedulerOptions()...)
	require.NoError(t, err)
	cands := []affinity.Backend{affinity.MustBackend("a", "", 1), affinity.MustBackend("b", "", 1)}
	for i := range 10 {
		_, hit, err := s.SelectBackend("down-"+string(rune('a'+i)), "", cands)
		require.NoError(t, err)
		require.False(t, hit)
	}
	require.Equal(t, uint64(1), s.StoreErrors(), "one failure, then the store is left alone for retry_after_seconds")
}
