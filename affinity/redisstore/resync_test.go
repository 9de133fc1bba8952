package redisstore_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
	"github.com/agentserve/sessionaffinity/hrw"
)

// cutProxy forwards loopback TCP connections to a Redis until cut: then it closes every
// connection and refuses new ones until restore (a network blip between one replica and
// Redis, which keeps its data). Stopped when the test ends.
type cutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	down   bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		u, err := net.Dial("tcp", p.target)
		if p.down || err != nil {
			p.mu.Unlock()
			_ = c.Close()
			if u != nil {
				_ = u.Close()
			}
			continue
		}
		p.conns = append(p.conns, c, u)
		p.wg.Go(func() { _, _ = io.Copy(u, c); _ = u.Close(); _ = c.Close() })
		p.wg.Go(func() { _, _ = io.Copy(c, u); _ = c.Close(); _ = u.Close() })
		p.mu.Unlock()
	}
}

// cut closes every forwarded connection and refuses new ones.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// TestResyncAfterFeedLoss: replica A binds sessions, then loses its invalidation feed
// without a failed call of its own (it serves only local hits): Redis restarts empty, or
// the network between A and Redis breaks for a moment. Meanwhile replica B binds one of
// A's sessions to another backend (a claim in the empty Redis, or a rebind whose
// invalidation A cannot receive). Once A's subscription is back, the session's first
// hit on A refreshes it, which finds B's binding and drops A's copy, and the turn after
// adopts B's backend; A's other bindings are in Redis again after their first hit.
// Without the resync A would keep its copy until the session's next TTL/8 boundary, up
// to 225 s: the session would alternate between two backends.
func TestResyncAfterFeedLoss(t *testing.T) {
	const n = 20
	for _, tc := range []struct {
		name string
		// loss breaks A's feed and returns the function that ends the break.
		loss func(f *fleet, p *cutProxy) (end func())
	}{
		{name: "redis restarted empty", loss: func(f *fleet, _ *cutProxy) func() {
			f.srv.Restart()
			return func() {}
		}},
		{name: "connection cut", loss: func(_ *fleet, p *cutProxy) func() {
			p.cut()
			return p.restore
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := newCutProxy(t, srv.Addr())
			f := newFleetVia(t, srv, affinity.Config{}, p.Addr(), srv.Addr())
			a, b, sta := f.scheds[0], f.scheds[1], f.stores[0]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			first := map[string]string{}
			for i := range n {
				x, hit := f.sel(t, 0, session(i))
				require.False(t, hit)
				first[session(i)] = x
			}
			f.sync(t)
			require.Zero(t, sta.Resyncs(), "no resync for the first subscription")
			f.clk.Advance(time.Second)

			end := tc.loss(f, p)
			s := session(0)
			x := first[s]
			for _, st := range f.stores[1:] { // B reaches Redis (after a restart: reconnected)
				for st.Ping(ctx) != nil {
					require.NoError(t, ctx.Err())
				}
			}
			bb, hit, err := b.SelectBackend(s, "", without(f.cands, x)) // B does not have x
			require.NoError(t, err)
			require.False(t, hit)
			y := bb.ID()
			require.NotEqual(t, x, y)
			end()
			require.NoError(t, sta.Sync(ctx)) // A's subscription is back: invalidations flow
			require.Equal(t, uint64(1), sta.Resyncs())
			require.Zero(t, a.StoreErrors(), "A made no failed call: no post-outage refresh")

			f.clk.Advance(time.Second)
			got, hit := f.sel(t, 0, s)
			require.True(t, hit)
			require.Equal(t, x, got, "this turn is answered from A's local copy")
			for i := 1; i < n; i++ {
				got, hit := f.sel(t, 0, session(i))
				require.True(t, hit)
				require.Equal(t, first[session(i)], got)
			}
			require.NoError(t, sta.Flush(ctx)) // the refreshes are sent and answered
			got, hit = f.sel(t, 0, s)
			require.True(t, hit, "B's binding, adopted")
			require.Equal(t, y, got)
			got, hit = f.sel(t, 1, s)
			require.True(t, hit)
			require.Equal(t, y, got, "one backend for the session")
			for i := 1; i < n; i++ {
				key := sta.Key(affinity.StoreKey{Session: hrw.KeyHash(session(i)), Tier: hrw.KeyHash("")})
				v, err := f.rdb.Get(ctx, key).Result()
				require.NoError(t, err, "session %d is in Redis again", i)
				require.Equal(t, first[session(i)], v)
			}
		})
	}
}

// TestResyncSignal: the resync reaches only the Scheduler that holds the Store now (a
// reload hands it to a new one), once per re-establishment of the subscription (here:
// Redis closes it, CLIENT KILL TYPE pubsub), with one INFO line; the subscription made
// at startup is no resync.
func TestResyncSignal(t *testing.T) {
	srv := redistest.Start(t)
	var buf syncBuffer
	st, err := redisstore.New(redisstore.Config{Address: srv.Addr(), TimeoutSeconds: 1},
		redisstore.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	require.NoError(t, err)
	defer st.Close()
	clk := affinitytest.NewClock(t0)
	cands := []affinity.Backend{affinity.MustBackend("b0", "", 1), affinity.MustBackend("b1", "", 1)}
	opts := append(st.SchedulerOptions(), affinity.WithClock(clk))
	old, err := affinity.New(affinity.Config{}, opts...)
	require.NoError(t, err)
	_, _, err = old.SelectBackend("old", "", cands)
	require.NoError(t, err)
	cur, err := affinity.New(affinity.Config{}, opts...) // the reload
	require.NoError(t, err)
	_, _, err = cur.SelectBackend("cur", "", cands)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, st.Sync(ctx))
	require.Zero(t, st.Resyncs())

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	keyOf := func(s string) string {
		return st.Key(affinity.StoreKey{Session: hrw.KeyHash(s), Tier: hrw.KeyHash("")})
	}
	for range 2 {
		require.NoError(t, rdb.Del(ctx, keyOf("old"), keyOf("cur")).Err())
		require.NoError(t, rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
		require.NoError(t, st.Sync(ctx))
	}
	require.Equal(t, uint64(2), st.Resyncs())
	resumed := 0
	for _, l := range buf.lines() {
		if strings.Contains(l, "invalidations resumed") {
			require.Contains(t, l, "level=INFO")
			resumed++
		}
	}
	require.Equal(t, 2, resumed, "one line per re-establishment: %q", buf.lines())
	warned := 0
	for _, l := range buf.lines() {
		if strings.Contains(l, "level=WARN") {
			// Only the subscription was cut: the WARN says so rather than that every
			// binding is now decided locally (tester30).
			require.Contains(t, l, "unavailable to the invalidation subscription", l)
			require.Contains(t, l, "op=watch", l)
			warned++
		}
	}
	require.Positive(t, warned, "the cut subscription is logged: %q", buf.lines())

	clk.Advance(time.Second)
	for s, sched := range map[string]*affinity.Scheduler{"old": old, "cur": cur} {
		_, hit, err := sched.SelectBackend(s, "", cands)
		require.NoError(t, err)
		require.True(t, hit)
	}
	require.NoError(t, st.Flush(ctx))
	n, err := rdb.Exists(ctx, keyOf("cur")).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the current Scheduler refreshed its binding")
	n, err = rdb.Exists(ctx, keyOf("old")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the replaced Scheduler was not signalled")
}
