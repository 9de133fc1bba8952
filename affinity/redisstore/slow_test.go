package redisstore_test

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
)

// TestRedisSilent: a server that accepts connections and never answers (a hung Redis):
// the first miss waits for the timeout, then decides locally; no request fails.
func TestRedisSilent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	})
	defer func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	st, err := redisstore.New(redisstore.Config{Address: ln.Addr().String(), TimeoutSeconds: 0.05, DialTimeoutSeconds: 0.2})
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
