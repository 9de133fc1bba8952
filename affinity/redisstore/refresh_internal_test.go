package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
)

// TestFlushMarkerLastInBatch: a Flush whose marker is the last of a full pipeline (the
// queue holds refreshBatch-1 refreshes and the marker when the worker wakes) returns
// once they are sent; the marker is not sent as a refresh. (Before, the batch's size
// ended the scan one place early: the marker went out as a refresh of key {0, 0} and
// that Flush waited for its context.)
func TestFlushMarkerLastInBatch(t *testing.T) {
	srv := redistest.Start(t)
	cfg, err := Config{Address: srv.Addr(), Prefix: "flush:"}.resolve()
	require.NoError(t, err)
	// A Store with only its refresh worker, started once its queue is filled, so that
	// its first batch is exactly that queue.
	st := &Store{cfg: cfg, client: redis.NewClient(&redis.Options{Addr: srv.Addr()}), refreshes: make(chan refreshReq, refreshQueue)}
	defer st.client.Close()
	for i := range refreshBatch - 1 {
		st.refreshes <- refreshReq{key: affinity.StoreKey{Session: uint64(i) + 1, Tier: 1}, backend: "b", ttl: time.Minute}
	}
	flushed := make(chan struct{})
	st.refreshes <- refreshReq{flushed: flushed}
	ctx, cancel := context.WithCancel(context.Background())
	st.done.Add(1)
	go st.refreshLoop(ctx)
	defer st.done.Wait()
	defer cancel()
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("the Flush marker in the batch's last place was not honoured")
	}
	n, err := st.client.DBSize(context.Background()).Result()
	require.NoError(t, err)
	require.Equal(t, int64(refreshBatch-1), n, "the refreshes, and no key for the marker")
}
