package affinity

import (
	"fmt"
	"math/bits"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// regBound is what the registry and every shard's per-backend arrays may grow to in
// TestRegistryBoundAcrossReloads, where at most 16 backends have bindings at a time: the
// registry frees unheld numbers once it holds regMinSweep entries, and its arrays are a
// power of two.
const regBound = 2 * regMinSweep

// checkRegBound fails when the registry or a shard's per-backend arrays outgrew regBound,
// or when a shard's held bits disagree with its bindings.
func checkRegBound(t *testing.T, tb *Table, round int) {
	t.Helper()
	require.LessOrEqual(t, tb.reg.size(), regBound, "round %d: registry", round)
	for s := range tb.shards {
		sh := &tb.shards[s]
		sh.mu.Lock()
		require.LessOrEqual(t, len(sh.slots), regBound, "round %d shard %d: slots", round, s)
		require.LessOrEqual(t, len(sh.bk), regBound, "round %d shard %d: lists", round, s)
		require.LessOrEqual(t, 64*len(sh.held), regBound+63, "round %d shard %d: held", round, s)
		bound := map[uint32]bool{}
		for _, l := range sh.lists {
			for i := l.head; i != 0; i = sh.at(i).next {
				bound[sh.at(i).slot] = true
			}
		}
		nheld := 0
		for _, w := range sh.held {
			nheld += bits.OnesCount64(w)
		}
		require.Len(t, bound, nheld, "round %d shard %d: held bits", round, s)
		for n := range bound {
			require.True(t, sh.holds(n), "round %d shard %d: backend %d not held", round, s, n)
		}
		sh.mu.Unlock()
	}
}

// TestRegistryBoundAcrossReloads: a table whose backends are replaced again and again by
// new IDs (a reload with new names) must not keep a number, a registry entry or a shard's
// per-backend slot for every ID it ever saw: once no shard has a binding to a backend,
// its number is freed and reused. 300 reloads of 8 new backends each (2,400 IDs), the old
// ones' bindings dropped in each way a binding goes.
func TestRegistryBoundAcrossReloads(t *testing.T) {
	const reloads, perReload, sessions = 300, 8, 512
	const evictCap = sessions / 4 // each round's sessions fill every shard past its cap
	ttl := 10 * time.Second
	cases := []struct {
		name string
		cap  int
		// drop makes the bindings of round r-1 (backends old) go, after round r bound
		// its sessions (to new backends).
		drop func(t *testing.T, tb *Table, clk *affinitytest.Clock, r int, old []string)
		// sess is the session ID of binding j of round r.
		sess func(r, j int) string
	}{
		{"DeleteBackend", 1 << 20, func(t *testing.T, tb *Table, _ *affinitytest.Clock, _ int, old []string) {
			for _, id := range old {
				tb.DeleteBackend(id)
			}
		}, func(r, j int) string { return fmt.Sprintf("r%d-s%d", r, j) }},
		{"Delete", 1 << 20, func(t *testing.T, tb *Table, _ *affinitytest.Clock, r int, _ []string) {
			for j := range sessions {
				require.True(t, tb.Delete(fmt.Sprintf("r%d-s%d", r-1, j), ""))
			}
		}, func(r, j int) string { return fmt.Sprintf("r%d-s%d", r, j) }},
		{"expiry+Sweep", 1 << 20, func(t *testing.T, tb *Table, clk *affinitytest.Clock, _ int, _ []string) {
			clk.Advance(ttl / 2)
			tb.Sweep()
		}, func(r, j int) string { return fmt.Sprintf("r%d-s%d", r, j) }},
		{"eviction", evictCap, func(*testing.T, *Table, *affinitytest.Clock, int, []string) {},
			func(r, j int) string { return fmt.Sprintf("r%d-s%d", r, j) }},
		{"rebind", 1 << 20, func(*testing.T, *Table, *affinitytest.Clock, int, []string) {},
			func(_, j int) string { return fmt.Sprintf("s%d", j) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := affinitytest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			tb, err := NewTable(Config{StickyTTLSeconds: TTLSeconds(int64(ttl / time.Second)), MaxBindings: c.cap}, WithClock(clk))
			require.NoError(t, err)
			var old []string
			for r := range reloads {
				ids := make([]string, perReload)
				for k := range ids {
					ids[k] = fmt.Sprintf("reload%d-backend%d", r, k)
				}
				if c.name == "expiry+Sweep" {
					clk.Advance(ttl / 2) // round r-1's bindings expire at the next drop
				}
				for j := range sessions {
					require.NoError(t, tb.Bind(c.sess(r, j), "", ids[j%perReload]))
				}
				if r > 0 {
					c.drop(t, tb, clk, r, old)
				}
				for _, id := range old {
					require.Zero(t, tb.DeleteBackend(id), "round %d: %s still bound", r, id)
				}
				for j := range sessions {
					got, ok := tb.Get(c.sess(r, j), "")
					if !ok && c.name == "eviction" { // shards fill unevenly: some of this round's go too
						continue
					}
					require.True(t, ok, "round %d session %d", r, j)
					require.Equal(t, ids[j%perReload], got, "round %d session %d", r, j)
				}
				checkRegBound(t, tb, r)
				old = ids
			}
		})
	}
}

// TestRegistryReuseConcurrent: goroutines, each with its own sessions and backends,
// reload to new backend IDs in a loop (misses on new candidates, the old ones dropped by
// OnBackendDown) while the registry frees and reuses numbers under them. Every binding
// must read back as the backend it was bound to (a reused number never makes one session's
// binding another backend's), and the registry stays bounded. Run with -race.
func TestRegistryReuseConcurrent(t *testing.T) {
	const workers, reloads, perReload, sessions = 4, 150, 4, 64
	s, err := New(Config{MaxBindings: 1 << 16})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var old []Backend
			for r := range reloads {
				cands := make([]Backend, perReload)
				for k := range cands {
					cands[k] = MustBackend(fmt.Sprintf("w%d-r%d-b%d", w, r, k), "", 0)
				}
				for j := range sessions {
					sess := fmt.Sprintf("w%d-s%d", w, j)
					b, _, err := s.SelectBackend(sess, "", cands)
					if err == nil {
						if got, ok := s.Table().Get(sess, ""); !ok || got != b.ID() {
							err = fmt.Errorf("round %d %s: bound to %q (%v), selected %s", r, sess, got, ok, b.ID())
						}
					}
					if err != nil {
						errs <- err
						return
					}
				}
				for _, b := range old {
					s.OnBackendDown(b.ID())
				}
				old = cands
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.LessOrEqual(t, s.t.reg.size(), regBound)
}

// TestShardSize: shards start on their own cache lines (the hit writes the first line
// of its shard only).
func TestShardSize(t *testing.T) {
	require.Zero(t, unsafe.Sizeof(shard{})%64)
}
