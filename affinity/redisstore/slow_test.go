package redisstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
)

// TestRedisSilent: a server that accepts connections and never answers (a hung Redis):
// the first miss waits for the timeout, then decides locally; no request fails.
func TestRedisSilent(t *testing.T) {
	st, err := redisstore.New(redisstore.Config{Address: silentServer(t), TimeoutSeconds: 0.05, DialTimeoutSeconds: 0.2})
	require.NoError(t, err)
	defer st.Close()
	s, err := affinity.New(affinity.Config{}, st.SchedulerOptions()...)
	require.NoError(t, err)
	cands := []affinity.Backend{affinity.MustBackend("a", "", 1), affinity.MustBackend("b", "", 1)}
	b1, hit, err := s.SelectBackend("silent-1", "", cands)
	require.NoError(t, err)
	require.False(t, hit)
	b2, hit, err := s.SelectBackend("silent-1", "", cands)
	require.NoError(t, err)
	require.True(t, hit, "the local decision is kept")
	require.Equal(t, b1.ID(), b2.ID())
	require.Equal(t, uint64(1), s.StoreErrors())
}
