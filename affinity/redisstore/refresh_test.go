package redisstore_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
	"github.com/agentserve/sessionaffinity/metrics"
)

// opCounter is a metrics.StoreRecorder that counts failures by op.
type opCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *opCounter) StoreError(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[op]++
}

func (c *opCounter) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

var _ metrics.StoreRecorder = (*opCounter)(nil)

// silentServer listens on a free loopback port, accepts connections and never answers
// them (a hung or SIGSTOPped Redis). It is closed when the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
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
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestRefreshFailuresCounted: a refresh batch that fails — against a Redis that never
// answers (the batch runs out of its own dial timeout) or one that is stopped — is
// counted as op "refresh", in the recorder and in Errors.
func TestRefreshFailuresCounted(t *testing.T) {
	stopped := func(t *testing.T) string {
		srv := redistest.Start(t)
		srv.Stop()
		return srv.Addr()
	}
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{
		{"silent", silentServer},
		{"stopped", stopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &opCounter{}
			st, err := redisstore.New(redisstore.Config{Address: tc.addr(t), DialTimeoutSeconds: 0.2}, redisstore.WithRecorder(rec))
			require.NoError(t, err)
			defer st.Close()
			st.Refresh(affinity.StoreKey{Session: 1, Tier: 2}, "a", time.Minute)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, st.Flush(ctx)) // returns once the batch has failed
			require.Equal(t, 1, rec.count(metrics.StoreOpRefresh))
			errs, dropped := st.Errors()
			require.Positive(t, errs)
			require.Zero(t, dropped)
		})
	}
}

// TestRefreshNotCountedOnClose: a refresh batch cut short by Close is not a failure.
func TestRefreshNotCountedOnClose(t *testing.T) {
	rec := &opCounter{}
	st, err := redisstore.New(redisstore.Config{Address: silentServer(t), DialTimeoutSeconds: 1}, redisstore.WithRecorder(rec))
	require.NoError(t, err)
	st.Refresh(affinity.StoreKey{Session: 1, Tier: 2}, "a", time.Minute)
	require.NoError(t, st.Close()) // cancels the batch waiting on the silent server (Close waits for its read deadline)
	require.Zero(t, rec.count(metrics.StoreOpRefresh))
}
