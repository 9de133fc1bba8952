package affinity_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

func TestMinRequestCostConfig(t *testing.T) {
	cases := []configCase{
		{"set", `{"load": {"balance_factor": 1.25, "min_request_cost": 1024}}`, ""},
		{"zero is off", `{"load": {"balance_factor": 1.25, "min_request_cost": 0}}`, ""},
		{"maximum", fmt.Sprintf(`{"load": {"balance_factor": 1.25, "min_request_cost": %d}}`, affinity.MaxLeaseCost), ""},
		{"with the drain model", `{"load": {"balance_factor": 1.25, "min_request_cost": 512, "drain_tokens_per_second": 16000}}`, ""},
		{"negative", `{"load": {"balance_factor": 1.25, "min_request_cost": -1}}`, "load.min_request_cost: -1"},
		{"above the maximum", fmt.Sprintf(`{"load": {"balance_factor": 1.25, "min_request_cost": %d}}`, affinity.MaxLeaseCost+1), "load.min_request_cost"},
		{"fraction", `{"load": {"balance_factor": 1.25, "min_request_cost": 1.5}}`, "load.min_request_cost"},
		{"without balance_factor", `{"load": {"min_request_cost": 1024}}`, "load.min_request_cost has no effect without load.balance_factor"},
	}
	runConfigCases(t, cases)

	// Through UnmarshalYAML (yaml.v2 and v3 would truncate 0.5 into the int64 field).
	var cfg affinity.Config
	err := cfg.UnmarshalYAML(func(v any) error {
		return json.Unmarshal([]byte(`{"load": {"balance_factor": 1.25, "min_request_cost": 0.5}}`), v)
	})
	require.ErrorIs(t, err, affinity.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "load.min_request_cost: 0.5 is not a whole number")
}

// cachedLeases opens n affinity hits on bs[0] whose prefix is cached in full (each is
// charged 1 token), as streaming turns of cached sessions in flight are, and returns
// them. Each session's first turn is leased and ended with its usage first, so that its
// binding knows the prompt size.
func cachedLeases(t *testing.T, s *affinity.Scheduler, bs []affinity.Backend, n int) []*affinity.Lease {
	t.Helper()
	var ids []string
	for i := 0; len(ids) < n; i++ { // first turns, each ended before the next: plain HRW
		require.Less(t, i, 100*n, "too few sessions hash to %s", bs[0].ID())
		id := fmt.Sprintf("cached-%d", i)
		first, err := acquire(s, id, "", bs, 1000)
		require.NoError(t, err)
		if first.Backend.ID() == bs[0].ID() {
			ids = append(ids, id)
		}
		first.Done(affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 1000, CacheReported: true})
	}
	var out []*affinity.Lease
	for _, id := range ids {
		l, err := acquire(s, id, "", bs, 1000)
		require.NoError(t, err)
		require.Equal(t, affinity.OutcomeHit, l.Outcome)
		out = append(out, l)
	}
	return out
}

// TestMinRequestCostPlacement: a backend busy with 16 cached decodes looks nearly idle to
// the lease-sum and drain views (1 token each), so new sessions pile onto it; with
// min_request_cost its open leases weigh at least that much each and new sessions avoid
// it.
func TestMinRequestCostPlacement(t *testing.T) {
	withFloor := func(c affinity.Config, m int64) affinity.Config {
		c.Load.DisableSpill = true // the busy backend's sessions stay: the test is about new ones
		c.Load.MinRequestCost = m
		return c
	}
	cases := []struct {
		name   string
		cfg    affinity.Config
		drain  bool // advance the clock until the drain model has drained the cached hits
		wantOn int  // new sessions (of 40) placed on the busy backend
	}{
		{"lease-sum, no floor", withFloor(loadCfg(1.25, 5), 0), false, 40},
		{"lease-sum, floor 1024", withFloor(loadCfg(1.25, 5), 1024), false, 0},
		{"drain model, no floor", withFloor(drainCfg(1.25, 5, 16000, 0), 0), true, 40},
		{"drain model, floor 1024", withFloor(drainCfg(1.25, 5, 16000, 0), 1024), true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bs := backendsN(3)
			s, clk := newSched(t, tc.cfg)
			busy := cachedLeases(t, s, bs, 16)
			// The two other backends each prefill 4 new sessions of 1000 tokens.
			var others []*affinity.Lease
			for _, b := range bs[1:] {
				for range 4 {
					l := new(affinity.Lease)
					require.NoError(t, s.LeaseBackend(b, 1000, l))
					others = append(others, l)
				}
			}
			if tc.drain {
				clk.Advance(10 * time.Millisecond) // 16 tokens at 16,000 tokens/s: drained; 4,000: not
			}
			on := 0
			for i := range 40 {
				l, err := acquire(s, fmt.Sprintf("new-%d", i), "", bs, 1000)
				require.NoError(t, err)
				require.Equal(t, affinity.OutcomeMiss, l.Outcome)
				if l.Backend.ID() == bs[0].ID() {
					on++
				}
				l.Done(affinity.DoneInfo{})
			}
			assert.Equal(t, tc.wantOn, on, "new sessions placed on the backend with 16 cached decodes")
			for _, l := range append(busy, others...) {
				l.Done(affinity.DoneInfo{})
			}
			assert.Zero(t, s.LoadView(bs[0].ID()), "no lease open")
		})
	}
}

// TestMinRequestCostView: the floor is a maximum over the open leases (not added to their
// charges), taken after the drain model, and the requests a backend reports beyond the
// leases keep queued_request_cost each; Load reports the charges without the floor.
func TestMinRequestCostView(t *testing.T) {
	bs := backendsN(1)
	id := bs[0].ID()
	cfg := loadCfg(1.25, 5)
	cfg.Load.MinRequestCost = 500
	cfg.Load.QueuedRequestCost = 100
	s, _ := newSched(t, cfg)

	var ls []*affinity.Lease
	lease := func(cost int64) {
		l := new(affinity.Lease)
		require.NoError(t, s.LeaseBackend(bs[0], cost, l))
		ls = append(ls, l)
	}
	lease(1)
	lease(1)
	assert.Equal(t, int64(1000), s.LoadView(id), "2 leases of 1 token: the floor, 2 x 500")
	assert.Equal(t, affinity.LoadSnapshot{Requests: 2, Cost: 2}, s.Load(id), "charges without the floor")
	lease(3000)
	assert.Equal(t, int64(3002), s.LoadView(id), "charges above 3 x 500: the charges, not charges + floor")
	require.NoError(t, s.ReportLoad(id, affinity.BackendLoad{Running: 3, Waiting: 2}))
	assert.Equal(t, int64(3002+2*100), s.LoadView(id), "2 reported requests beyond the 3 leases")
	ls[2].Done(affinity.DoneInfo{})
	assert.Equal(t, int64(1000+2*100), s.LoadView(id), "back to the floor")

	d, clk := newSched(t, func() affinity.Config {
		c := drainCfg(1.25, 5, 1000, 0)
		c.Load.MinRequestCost = 500
		return c
	}())
	for range 2 {
		l := new(affinity.Lease)
		require.NoError(t, d.LeaseBackend(bs[0], 2000, l))
		ls = append(ls, l)
	}
	assert.Equal(t, int64(4000), d.LoadView(id), "undrained work above the floor")
	clk.Advance(3 * time.Second)
	assert.Equal(t, int64(1000), d.LoadView(id), "3,000 of 4,000 tokens drained: the floor, 2 x 500")
	clk.Advance(time.Hour)
	assert.Equal(t, int64(1000), d.LoadView(id), "drained: the open leases still count 500 each")
	for _, l := range ls {
		l.Done(affinity.DoneInfo{})
	}
	require.NoError(t, s.ReportLoad(id, affinity.BackendLoad{}))
	assert.Zero(t, s.LoadView(id))
	assert.Zero(t, d.LoadView(id))
}

// TestMinRequestCostSpillGuard: the floor counts in the bound (a backend with one more
// request in flight than the other can be over it) but not as wait in the spill guard
// (rule 14e): a bound session with a short prompt (500 tokens, so 5 x 500 = 2,500 tokens
// of wait would pay for its move, under one floor of 4,096) stays while its backend's
// extra requests are cached decodes (1 token of prefill each), and still moves when they
// are queued prefill. New sessions see the floor all the same: with two cached decodes
// against one 3,000-token prefill they avoid the session's backend with the floor and
// take it without. Before the guard read waits without the floor, the first four cases
// spilled.
func TestMinRequestCostSpillGuard(t *testing.T) {
	const prompt = 500
	withFloor := func(c affinity.Config, m int64) affinity.Config {
		c.Load.MinRequestCost = m
		return c
	}
	cases := []struct {
		name          string
		cfg           affinity.Config
		home, other   []int64 // the charges of the leases open on the session's backend and on the other
		drain         bool    // advance the clock until the drain model has drained them
		want          affinity.Outcome
		wantNewOnHome bool // a new session whose HRW winner is the session's backend lands there
	}{
		{"floor, one more cached decode than the target", withFloor(loadCfg(1.25, 5), 4096),
			[]int64{1, 1}, []int64{1}, false, affinity.OutcomeHit, false},
		{"floor, one cached decode, target idle", withFloor(loadCfg(1.25, 5), 4096),
			[]int64{1}, nil, false, affinity.OutcomeHit, false},
		{"floor and drain model, one more drained request", withFloor(drainCfg(1.25, 5, 16000, 0), 4096),
			[]int64{2000, 2000}, []int64{2000}, true, affinity.OutcomeHit, false},
		{"floor, queued prefill above the allowance still spills", withFloor(loadCfg(1.25, 5), 4096),
			[]int64{4000}, nil, false, affinity.OutcomeSpill, false},
		{"floor, two more queued prefills spill", withFloor(loadCfg(1.25, 5), 4096),
			[]int64{1, 1500, 1500}, []int64{1}, false, affinity.OutcomeSpill, false},
		{"floor, two cached decodes against a prefill", withFloor(loadCfg(1.25, 5), 4096),
			[]int64{1, 1}, []int64{3000}, false, affinity.OutcomeHit, false},
		{"no floor, one more cached decode", loadCfg(1.25, 5),
			[]int64{1, 1}, []int64{1}, false, affinity.OutcomeHit, false},
		{"no floor, two cached decodes against a prefill", loadCfg(1.25, 5),
			[]int64{1, 1}, []int64{3000}, false, affinity.OutcomeHit, true},
		{"no floor, queued prefill above the allowance spills", loadCfg(1.25, 5),
			[]int64{4000}, nil, false, affinity.OutcomeSpill, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bs := backendsN(2)
			s, clk := newSched(t, tc.cfg)
			home := bs[0]
			sess := sessionOn(t, "short-", home.ID(), bs)
			first, err := acquire(s, sess, "", bs, prompt)
			require.NoError(t, err)
			require.Equal(t, home.ID(), first.Backend.ID())
			first.Done(affinity.DoneInfo{PromptTokens: prompt, CacheReported: true})

			var open []*affinity.Lease
			for i, charges := range [][]int64{tc.home, tc.other} {
				for _, c := range charges {
					l := new(affinity.Lease)
					require.NoError(t, s.LeaseBackend(bs[i], c, l))
					open = append(open, l)
				}
			}
			if tc.drain {
				clk.Advance(time.Second) // 6,000 tokens at 16,000 tokens/s: drained
			}
			l, err := acquire(s, sess, "", bs, prompt)
			require.NoError(t, err)
			assert.Equal(t, tc.want, l.Outcome, "home load %d, other %d", s.LoadView(home.ID()), s.LoadView(bs[1].ID()))
			l.Done(affinity.DoneInfo{})

			n, err := acquire(s, sessionOn(t, "new-", home.ID(), bs), "", bs, prompt)
			require.NoError(t, err)
			assert.Equal(t, tc.wantNewOnHome, n.Backend.ID() == home.ID(), "new session on the session's backend")
			n.Done(affinity.DoneInfo{})
			for _, l := range open {
				l.Done(affinity.DoneInfo{})
			}
		})
	}
}
