package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fleet is n Schedulers (gateway replicas), each with its own Store, on one Redis, with
// one fake clock.
type fleet struct {
	srv    *redistest.Server
	clk    *affinitytest.Clock
	stores []*redisstore.Store
	scheds []*affinity.Scheduler
	cands  []affinity.Backend
	rdb    *redis.Client
	calls  uint64 // SelectBackend calls made by agree
}

func newFleet(t *testing.T, n int, cfg affinity.Config) *fleet {
	t.Helper()
	srv := redistest.Start(t)
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = srv.Addr()
	}
	return newFleetVia(t, srv, cfg, addrs...)
}

// newFleetVia is newFleet on srv with one replica per address: replica i's Store
// connects to addrs[i] (srv's own address, or a proxy in front of it).
func newFleetVia(t *testing.T, srv *redistest.Server, cfg affinity.Config, addrs ...string) *fleet {
	t.Helper()
	f := &fleet{srv: srv, clk: affinitytest.NewClock(t0)}
	for i := range 5 {
		f.cands = append(f.cands, affinity.MustBackend(fmt.Sprintf("b%d", i), "", 1))
	}
	for _, addr := range addrs {
		st, err := redisstore.New(redisstore.Config{Address: addr, Prefix: "test:" + t.Name() + ":", TimeoutSeconds: 1})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		opts := append(st.SchedulerOptions(), affinity.WithClock(f.clk))
		s, err := affinity.New(cfg, opts...)
		require.NoError(t, err)
		f.stores = append(f.stores, st)
		f.scheds = append(f.scheds, s)
	}
	f.rdb = redis.NewClient(&redis.Options{Addr: f.srv.Addr()})
	t.Cleanup(func() { _ = f.rdb.Close() })
	return f
}

func (f *fleet) sel(t *testing.T, r int, session string) (string, bool) {
	t.Helper()
	b, hit, err := f.scheds[r].SelectBackend(session, "", f.cands)
	require.NoError(t, err)
	return b.ID(), hit
}

// sync waits until every replica has received every invalidation published so far.
func (f *fleet) sync(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, st := range f.stores {
		require.NoError(t, st.Flush(ctx))
	}
	for _, st := range f.stores {
		require.NoError(t, st.Sync(ctx))
	}
}

func (f *fleet) totals() (hits, misses uint64) {
	for _, s := range f.scheds {
		st := s.Stats()
		hits += st.Hits
		misses += st.Misses
	}
	return hits, misses
}

func session(i int) string { return fmt.Sprintf("sess-%06d", i) }

// agree gives each session a turn on every replica (starting with replica first: a
// replica that sees a backend Down moves the session), waits for the invalidations, then
// requires every replica to return the same backend for every session, as a hit. It
// returns session -> backend and counts its calls in f.calls.
func (f *fleet) agree(t *testing.T, sessions, first int) map[string]string {
	t.Helper()
	for k := range f.scheds {
		r := (first + k) % len(f.scheds)
		for i := range sessions {
			f.sel(t, r, session(i))
		}
	}
	f.sync(t)
	got := make(map[string]string, sessions)
	for r := range f.scheds {
		for i := range sessions {
			b, hit := f.sel(t, r, session(i))
			if r == 0 {
				got[session(i)] = b
			}
			require.Equal(t, got[session(i)], b, "replica %d session %d", r, i)
			require.True(t, hit, "replica %d session %d", r, i)
		}
	}
	f.calls += uint64(2 * len(f.scheds) * sessions)
	return got
}

// TestFleetContract: 3 replicas, 10,000 sessions: first turns spread over the replicas,
// a failover seen by one replica only, a drain, forgets — after each step every replica
// returns the same backend for every session, and hits + misses add up once.
func TestFleetContract(t *testing.T) {
	const n = 10000
	f := newFleet(t, 3, affinity.Config{})
	var calls uint64

	// First turns: session i on replica i%3. One miss each.
	first := make(map[string]string, n)
	for i := range n {
		b, hit := f.sel(t, i%3, session(i))
		require.False(t, hit)
		first[session(i)] = b
	}
	calls += n
	hits, misses := f.totals()
	require.Equal(t, uint64(0), hits)
	require.Equal(t, uint64(n), misses)

	// Every replica agrees; later turns are hits everywhere.
	got := f.agree(t, n, 1)
	require.Equal(t, first, got)
	hits, misses = f.totals()
	require.Equal(t, calls+f.calls, hits+misses)
	require.Equal(t, uint64(n), misses)

	// Failover seen by replica 0 only: its sessions on b1 move when replica 0 serves
	// their next turn; the others follow through the store.
	require.Positive(t, f.scheds[0].OnBackendDown("b1"))
	moved := 0
	for i := range n {
		b, hit := f.sel(t, 0, session(i))
		if first[session(i)] == "b1" {
			require.False(t, hit)
			require.NotEqual(t, "b1", b)
			moved++
		} else {
			require.True(t, hit)
			require.Equal(t, first[session(i)], b)
		}
	}
	calls += n
	require.Positive(t, moved)
	got = f.agree(t, n, 0)
	for s, b := range got {
		require.NotEqual(t, "b1", b, s)
	}
	hits, misses = f.totals()
	require.Equal(t, calls+f.calls, hits+misses)
	require.Equal(t, uint64(n+moved), misses, "one miss per first turn and per moved session, fleet-wide")

	// Drain b2 on replica 1: its sessions stay (hits everywhere), new sessions avoid it
	// on replica 1 and every replica follows replica 1's placement.
	f.scheds[1].OnBackendDraining("b2")
	onB1 := 0
	for i := n; i < n+1000; i++ {
		b, hit := f.sel(t, 1, session(i))
		require.False(t, hit)
		require.NotEqual(t, "b2", b)
		if b == "b1" { // healthy in replica 1's view; replica 0 will move it
			onB1++
		}
	}
	calls += 1000
	_, misses0 := f.totals()
	got = f.agree(t, n+1000, 2)
	for i := range n + 1000 {
		require.NotEqual(t, "b1", got[session(i)])
	}
	for i := range n {
		if first[session(i)] == "b2" {
			require.Equal(t, "b2", got[session(i)], "a draining backend keeps its sessions")
		}
	}
	_, misses = f.totals()
	require.Positive(t, onB1)
	require.Equal(t, uint64(onB1), misses-misses0, "each session replica 0 moved off b1 is one miss")

	// Forget on replica 2: every replica drops it; the next turn is one miss fleet-wide.
	for i := range 1000 {
		require.True(t, f.scheds[2].Forget(session(i), ""))
	}
	f.sync(t)
	for r := range f.scheds {
		for i := range 1000 {
			_, ok := f.scheds[r].Lookup(session(i), "")
			require.False(t, ok, "replica %d still holds session %d", r, i)
		}
	}
	_, misses0 = f.totals()
	f.agree(t, 1000, 0)
	hits, misses = f.totals()
	require.Equal(t, calls+f.calls, hits+misses)
	require.Equal(t, misses0+1000, misses, "one miss per forgotten session, fleet-wide")
	for _, s := range f.scheds {
		require.Zero(t, s.StoreErrors())
	}
}

// TestConcurrentFirstTurns: first turns of one session racing on two replicas make one
// binding and one miss in total; both get the same backend.
func TestConcurrentFirstTurns(t *testing.T) {
	const n = 500
	f := newFleet(t, 2, affinity.Config{})
	// Replica 1 sees b0 Down, so its HRW winner differs from replica 0's for a fifth of
	// the sessions: the claim, not HRW, must make them agree.
	f.scheds[1].Health().MarkDown("b0")
	res := make([][2]string, n)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			for i := range n {
				b, _, err := f.scheds[r].SelectBackend(session(i), "", f.cands)
				if err != nil {
					panic(err)
				}
				res[i][r] = b.ID()
			}
		})
	}
	wg.Wait()
	hits, misses := f.totals()
	require.Equal(t, uint64(2*n), hits+misses)
	// A session claimed with b0 by replica 0 is rebound by replica 1 (b0 is Down in its
	// view), so such sessions count two misses; all others exactly one.
	rebound := 0
	for i := range n {
		if res[i][0] != res[i][1] {
			require.Equal(t, "b0", res[i][0], "session %d", i)
			rebound++
		}
	}
	require.Equal(t, uint64(n+rebound), misses)
}

// TestRedisKilledAndRestarted: Redis dies mid-traffic; no request fails, hits stay local,
// new sessions are placed locally (errors counted); Redis comes back empty and the
// replicas converge again, even where their health views diverged meanwhile.
func TestRedisKilledAndRestarted(t *testing.T) {
	const n = 1000
	f := newFleet(t, 3, affinity.Config{})
	for i := range n {
		f.sel(t, i%3, session(i))
	}
	f.agree(t, n, 0)

	f.srv.Stop()
	for r := range f.scheds {
		for i := range n {
			_, hit := f.sel(t, r, session(i))
			require.True(t, hit) // local near-cache
		}
	}
	// New sessions while Redis is down: decided locally, counted.
	for i := n; i < n+300; i++ {
		_, hit := f.sel(t, i%3, session(i))
		require.False(t, hit)
	}
	var errs uint64
	for _, s := range f.scheds {
		errs += s.StoreErrors()
	}
	require.Positive(t, errs)
	// Replica 0 sees b3 fail while Redis is down; the others do not.
	f.scheds[0].OnBackendDown("b3")
	for i := range n + 300 {
		f.sel(t, 0, session(i))
	}

	f.srv.Restart() // empty: no persistence
	// Past the retry interval and one refresh period: every hit refreshes its binding,
	// which re-creates it in Redis or finds another replica's value and drops the copy.
	f.clk.Advance(1800 * time.Second / 8)
	for r := range f.scheds {
		for i := range n + 300 {
			f.sel(t, r, session(i))
		}
	}
	f.sync(t)
	got := f.agree(t, n+300, 0)
	for s, b := range got {
		require.NotEqual(t, "b3", b, s)
	}
	keys, err := f.rdb.DBSize(context.Background()).Result()
	require.NoError(t, err)
	require.Equal(t, int64(n+300), keys)
}

// TestConcurrentFirstTurnsThreeReplicas: every session's first turn arrives at three
// replicas (same health view) at once, twice per replica: one miss per session in
// total, one backend.
func TestConcurrentFirstTurnsThreeReplicas(t *testing.T) {
	const n = 500
	f := newFleet(t, 3, affinity.Config{})
	res := make([][6]string, n)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range n {
				b, _, err := f.scheds[g%3].SelectBackend(session(i), "", f.cands)
				if err != nil {
					panic(err)
				}
				res[i][g] = b.ID()
			}
		})
	}
	wg.Wait()
	for i := range n {
		for g := range 6 {
			require.Equal(t, res[i][0], res[i][g], "session %d", i)
		}
	}
	hits, misses := f.totals()
	require.Equal(t, uint64(n), misses, "one miss per session across the fleet")
	require.Equal(t, uint64(5*n), hits)
}
