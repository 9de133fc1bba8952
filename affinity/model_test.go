package affinity_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// schedModel is a plain reference implementation of the Scheduler contract, down to the
// documented details that make eviction exact: the shard split of the cap, two expired
// bindings reclaimed per TTL class from the oldest end on every insert, at the cap the
// shard's binding with the oldest lastUse evicted (ties: the shorter TTL class, then the
// least recently stored), and a stored lastUse never older than the newest one of its
// shard's TTL class (so a clock moving back cannot reorder a list).
type schedModel struct {
	tierTTL map[string]int64 // nanoseconds; 0 = disabled
	classes []int64          // distinct non-zero TTLs, ascending
	shift   uint
	caps    []int
	now     int64
	seq     int
	health  map[string]health.State // effective: Down if down, else Draining if drained
	down    map[string]bool         // observed down
	drained map[string]bool         // operator drain
	m       map[modelKey]*modelEntry
	st      affinity.Stats
	rec     map[modelEvent]int
}

type modelKey struct{ session, tier string }

type modelEntry struct {
	backend string
	lastUse int64
	seq     int
	class   int
	shard   int
}

type modelEvent struct {
	kind   metrics.Kind
	tier   string
	reason metrics.Reason
}

func newSchedModel(maxBindings int, tierTTL map[string]int64) *schedModel {
	md := &schedModel{tierTTL: tierTTL, health: map[string]health.State{}, down: map[string]bool{}, drained: map[string]bool{}, m: map[modelKey]*modelEntry{}, rec: map[modelEvent]int{}}
	for _, d := range tierTTL {
		if d > 0 && !contains(md.classes, d) {
			md.classes = append(md.classes, d)
		}
	}
	for i := 1; i < len(md.classes); i++ { // insertion sort, ascending
		for j := i; j > 0 && md.classes[j] < md.classes[j-1]; j-- {
			md.classes[j], md.classes[j-1] = md.classes[j-1], md.classes[j]
		}
	}
	n, bits := 64, uint(6)
	for n > 1 && maxBindings/n < 16 {
		n, bits = n/2, bits-1
	}
	md.shift = 64 - bits
	for i := range n {
		c := maxBindings / n
		if i < maxBindings%n {
			c++
		}
		md.caps = append(md.caps, c)
	}
	return md
}

func contains(s []int64, v int64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (md *schedModel) ttl(tier string) int64 { return md.tierTTL[tier] }

func (md *schedModel) classOf(tier string) int {
	for i, d := range md.classes {
		if d == md.ttl(tier) {
			return i
		}
	}
	return -1
}

func (md *schedModel) shardOf(session string) int {
	if md.shift == 64 {
		return 0
	}
	return int(hrw.KeyHash(session) >> md.shift)
}

func (md *schedModel) valid(e *modelEntry) bool { return md.now-e.lastUse < md.classes[e.class] }

func (md *schedModel) record(kind metrics.Kind, tier string, reason metrics.Reason) {
	md.rec[modelEvent{kind, tier, reason}]++
}

// stamp returns the lastUse a binding of class cls in shard sh gets now.
func (md *schedModel) stamp(sh, cls int) int64 {
	t := md.now
	for _, e := range md.m {
		if e.shard == sh && e.class == cls && e.lastUse > t {
			t = e.lastUse
		}
	}
	return t
}

// oldest returns the key of the least recent binding of class cls in shard sh
// (cls < 0: of any class), ok=false if there is none.
func (md *schedModel) oldest(sh, cls int) (modelKey, bool) {
	var bk modelKey
	var b *modelEntry
	for k, e := range md.m {
		if e.shard != sh || (cls >= 0 && e.class != cls) {
			continue
		}
		if b == nil || e.lastUse < b.lastUse ||
			(e.lastUse == b.lastUse && (e.class < b.class || (e.class == b.class && e.seq < b.seq))) {
			bk, b = k, e
		}
	}
	return bk, b != nil
}

func (md *schedModel) eligible(cands []affinity.Backend) []affinity.Backend {
	for _, want := range []health.State{health.Healthy, health.Draining} {
		var out []affinity.Backend
		for _, b := range cands {
			if md.health[b.ID()] == want {
				out = append(out, b)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// selectBackend returns the expected (backend ID, hit, ok); ok=false: ErrNoEligibleBackend.
func (md *schedModel) selectBackend(session, tier string, cands []affinity.Backend) (string, bool, bool) {
	k := modelKey{session, tier}
	elig := md.eligible(cands)
	if md.ttl(tier) == 0 {
		if elig == nil {
			return "", false, false
		}
		md.st.Misses++
		md.record(metrics.KindMiss, tier, 0)
		return hrwWinner(session, elig), false, true
	}
	e, found := md.m[k]
	var reason metrics.Reason
	if found && md.valid(e) {
		in := false
		for _, b := range cands {
			in = in || b.ID() == e.backend
		}
		switch {
		case !in:
			reason = metrics.ReasonNotCandidate
		case md.health[e.backend] == health.Down:
			reason = metrics.ReasonUnhealthy
		default:
			e.lastUse = md.stamp(e.shard, e.class)
			md.seq++
			e.seq = md.seq
			md.st.Hits++
			md.record(metrics.KindHit, tier, 0)
			return e.backend, true, true
		}
	}
	if elig == nil {
		return "", false, false
	}
	w := hrwWinner(session, elig)
	if found {
		delete(md.m, k)
		switch reason {
		case 0:
			md.st.Expired++
		case metrics.ReasonUnhealthy:
			md.st.Broken.Unhealthy++
		case metrics.ReasonNotCandidate:
			md.st.Broken.NotCandidate++
		}
		if reason != 0 {
			md.record(metrics.KindBroken, tier, reason)
		}
	}
	sh, cls := md.shardOf(session), md.classOf(tier)
	for c := range md.classes { // amortized reclaim: two per class list
		for range 2 {
			k2, ok := md.oldest(sh, c)
			if !ok || md.valid(md.m[k2]) {
				break
			}
			delete(md.m, k2)
			md.st.Expired++
		}
	}
	n := 0
	for _, e := range md.m {
		if e.shard == sh {
			n++
		}
	}
	if n >= md.caps[sh] {
		v, _ := md.oldest(sh, -1)
		delete(md.m, v)
		md.st.Evictions++
		md.record(metrics.KindEvicted, v.tier, 0)
	}
	md.seq++
	md.m[k] = &modelEntry{backend: w, lastUse: md.stamp(sh, cls), seq: md.seq, class: cls, shard: sh}
	md.st.Misses++
	md.record(metrics.KindMiss, tier, 0)
	return w, false, true
}

// observe records an observation and recomputes the effective state of id.
func (md *schedModel) observe(id string, up bool) {
	md.down[id] = !up
	md.effective(id)
}

// setDrain drains or undrains id and recomputes its effective state.
func (md *schedModel) setDrain(id string, drained bool) {
	md.drained[id] = drained
	md.effective(id)
}

func (md *schedModel) effective(id string) {
	switch {
	case md.down[id]:
		md.health[id] = health.Down
	case md.drained[id]:
		md.health[id] = health.Draining
	default:
		md.health[id] = health.Healthy
	}
}

func (md *schedModel) backendDown(id string) int {
	md.observe(id, false)
	n := 0
	for k, e := range md.m {
		if e.backend != id {
			continue
		}
		if md.valid(e) {
			n++
			md.st.Broken.Down++
			md.record(metrics.KindBroken, k.tier, metrics.ReasonDown)
		} else {
			md.st.Expired++
		}
		delete(md.m, k)
	}
	return n
}

func (md *schedModel) sweep() int {
	n := 0
	for k, e := range md.m {
		if !md.valid(e) {
			delete(md.m, k)
			n++
		}
	}
	md.st.Expired += uint64(n)
	return n
}

func (md *schedModel) stats() affinity.Stats {
	st := md.st
	st.Bindings = len(md.m)
	return st
}

func recordedEvents(r *metrics.Recording) map[modelEvent]int {
	out := map[modelEvent]int{}
	for _, e := range r.Events() {
		out[modelEvent{e.Kind, e.Tier, e.Reason}]++
	}
	return out
}

// TestSchedulerModel drives a Scheduler with random calls — several tiers in three TTL
// classes plus a disabled tier and one whose override equals the default, candidate
// subsets, every health transition (also marked directly in the set), OnBackendDown,
// Sweep, Forget, clock steps of zero (lastUse ties), forward and backward — on one, two
// and four shards with about twice as many keys as the cap, and compares every result,
// Stats and the Recorder's events with schedModel.
func TestSchedulerModel(t *testing.T) {
	for _, maxBindings := range []int{12, 40, 70} {
		t.Run(fmt.Sprint(maxBindings), func(t *testing.T) {
			for seed := range modelSeeds {
				runSchedulerModel(t, maxBindings, uint64(maxBindings)<<32|seed)
			}
		})
	}
}

// modelSeeds is the number of seeds per cap (raise it locally for a longer search).
var modelSeeds uint64 = 1

func runSchedulerModel(t *testing.T, maxBindings int, seed uint64) {
	cfg := affinity.Config{
		StickyTTLSeconds: affinity.TTLSeconds(10),
		MaxBindings:      maxBindings,
		Tiers: map[string]affinity.TierConfig{
			"gold":  {StickyTTLSeconds: affinity.TTLSeconds(30)},
			"short": {StickyTTLSeconds: affinity.TTLSeconds(3)},
			"same":  {StickyTTLSeconds: affinity.TTLSeconds(10)},
			"free":  {StickyTTLSeconds: affinity.TTLSeconds(0)},
		},
	}
	sec := int64(time.Second)
	tierTTL := map[string]int64{"": 10 * sec, "gold": 30 * sec, "short": 3 * sec, "same": 10 * sec, "free": 0}
	tiers := []string{"", "gold", "short", "same", "free"}
	f := newFixture(t, cfg)
	md := newSchedModel(maxBindings, tierTTL)
	bs := backends(t, 5)
	rng := rand.New(rand.NewPCG(seed, 99))
	sessions := maxBindings/2 + 2 // times 5 tiers: about twice the cap in keys
	ops := 8_000
	if testing.Short() {
		ops = 2_000
	}

	check := func(op int, what string) {
		require.Equal(t, md.stats(), f.s.Stats(), "op %d (%s): Stats", op, what)
		require.Equal(t, md.stats().Bindings, f.s.Len(), "op %d: Len", op)
	}
	for op := range ops {
		switch r := rng.IntN(1000); {
		case r < 700: // SelectBackend
			session := fmt.Sprintf("s%d", rng.IntN(sessions))
			tier := tiers[rng.IntN(len(tiers))]
			var cands []affinity.Backend
			for _, i := range rng.Perm(len(bs)) {
				if rng.IntN(10) < 8 {
					cands = append(cands, bs[i])
				}
			}
			if len(cands) == 0 {
				cands = append(cands, bs[rng.IntN(len(bs))])
			}
			want, wantHit, ok := md.selectBackend(session, tier, cands)
			b, hit, err := f.s.SelectBackend(session, tier, cands)
			if !ok {
				require.True(t, errors.Is(err, affinity.ErrNoEligibleBackend), "op %d: %v", op, err)
			} else {
				require.NoError(t, err, "op %d", op)
				require.Equal(t, want, b.ID(), "op %d: select %s/%s", op, session, tier)
				require.Equal(t, wantHit, hit, "op %d: select %s/%s hit", op, session, tier)
			}
			check(op, "select")
		case r < 800: // clock: ties, small and large steps, sometimes backwards
			var d int64
			switch rng.IntN(10) {
			case 0, 1, 2:
				d = 0
			case 3:
				d = -int64(rng.IntN(3000)) * int64(time.Millisecond)
			default:
				d = int64(rng.IntN(4000)) * int64(time.Millisecond)
			}
			f.clk.Advance(time.Duration(d))
			md.now += d
		case r < 812: // OnBackendDown
			id := bs[rng.IntN(len(bs))].ID()
			require.Equal(t, md.backendDown(id), f.s.OnBackendDown(id), "op %d: OnBackendDown(%s)", op, id)
			check(op, "down")
		case r < 870: // OnBackendUp: an observation, never ends a drain
			id := bs[rng.IntN(len(bs))].ID()
			md.observe(id, true)
			f.s.OnBackendUp(id)
		case r < 880: // OnBackendDraining: operator intent
			id := bs[rng.IntN(len(bs))].ID()
			md.setDrain(id, true)
			f.s.OnBackendDraining(id)
		case r < 885: // Undrain: the only end of a drain
			id := bs[rng.IntN(len(bs))].ID()
			md.setDrain(id, false)
			f.s.Undrain(id)
		case r < 900: // Down in the shared set only: bindings break lazily (unhealthy)
			id := bs[rng.IntN(len(bs))].ID()
			md.observe(id, false)
			f.s.Health().MarkDown(id)
		case r < 920:
			require.Equal(t, md.sweep(), f.s.Sweep(), "op %d: Sweep", op)
			check(op, "sweep")
		case r < 950: // Forget counts nothing
			k := modelKey{fmt.Sprintf("s%d", rng.IntN(sessions)), tiers[rng.IntN(len(tiers))]}
			_, want := md.m[k]
			delete(md.m, k)
			require.Equal(t, want, f.s.Forget(k.session, k.tier), "op %d: Forget", op)
		default: // Lookup never extends
			k := modelKey{fmt.Sprintf("s%d", rng.IntN(sessions)), tiers[rng.IntN(len(tiers))]}
			id, ok := f.s.Lookup(k.session, k.tier)
			e, found := md.m[k]
			wantOK := found && md.valid(e)
			require.Equal(t, wantOK, ok, "op %d: Lookup %v", op, k)
			if ok {
				require.Equal(t, e.backend, id)
			}
		}
		if op%500 == 499 || op == ops-1 {
			require.Equal(t, md.rec, recordedEvents(f.rec), "op %d: recorder events", op)
			for k, e := range md.m {
				id, ok := f.s.Lookup(k.session, k.tier)
				require.Equal(t, md.valid(e), ok, "op %d: Lookup %v", op, k)
				if ok {
					require.Equal(t, e.backend, id)
				}
			}
		}
	}
	st := f.s.Stats()
	t.Logf("%+v", st)
	require.NotZero(t, st.Evictions)
	require.NotZero(t, st.Expired)
	require.NotZero(t, st.Broken.Down)
	require.NotZero(t, st.Broken.Unhealthy)
	require.NotZero(t, st.Broken.NotCandidate)
}
