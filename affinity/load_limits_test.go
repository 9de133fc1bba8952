package affinity_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// newFromJSON decodes doc into a Config and builds a Scheduler from it.
func newFromJSON(doc string) (*affinity.Scheduler, error) {
	var cfg affinity.Config
	if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
		return nil, err
	}
	return affinity.New(cfg)
}

// TestLoadConfigRanges: every numeric load key has a range; its edges are accepted, a
// value beyond them is ErrInvalidConfig naming the key.
func TestLoadConfigRanges(t *testing.T) {
	const on = `"balance_factor": 1.25, `
	const drain = `"drain_tokens_per_second": 16000, `
	cases := []struct {
		name    string
		load    string // the load block's keys
		wantErr string // "" = valid
	}{
		{"balance factor max", `"balance_factor": 100`, ""},
		{"balance factor above max", `"balance_factor": 100.5`, "load.balance_factor: 100.5"},
		{"balance factor huge", `"balance_factor": 1e308`, "load.balance_factor"},
		{"spill weight max", on + `"spill_cost_weight": 70368744177664`, ""},
		{"spill weight above max", on + `"spill_cost_weight": 1e15`, "load.spill_cost_weight: 1e+15"},
		{"queued cost max", on + `"queued_request_cost": 16777216`, ""},
		{"queued cost above max", on + `"queued_request_cost": 16777217`, "load.queued_request_cost: 16777217"},
		{"queued cost max int64", on + `"queued_request_cost": 9223372036854775807`, "load.queued_request_cost: 9223372036854775807"},
		{"cold ratio 1", on + `"cold_cache_ratio": 1`, ""},
		{"cold ratio tiny", on + `"cold_cache_ratio": 1e-9`, ""},
		{"cold ratio negative", on + `"cold_cache_ratio": -0.1`, "load.cold_cache_ratio: -0.1"},
		{"drain rate min", on + `"drain_tokens_per_second": 1`, ""},
		{"drain rate max", on + `"drain_tokens_per_second": 1e9`, ""},
		{"drain rate 1e-300", on + `"drain_tokens_per_second": 1e-300`, "load.drain_tokens_per_second: 1e-300"},
		{"drain rate below min", on + `"drain_tokens_per_second": 0.5`, "load.drain_tokens_per_second: 0.5"},
		{"drain rate above max", on + `"drain_tokens_per_second": 2e9`, "load.drain_tokens_per_second: 2e+09"},
		{"ewma weight min", on + drain + `"drain_ewma_weight": 0.0001`, ""},
		{"ewma weight 1", on + drain + `"drain_ewma_weight": 1`, ""},
		{"ewma weight below min", on + drain + `"drain_ewma_weight": 1e-300`, "load.drain_ewma_weight: 1e-300"},
		{"ewma weight above 1", on + drain + `"drain_ewma_weight": 1.5`, "load.drain_ewma_weight: 1.5"},
		{"guard max", on + drain + `"retention_guard_factor": 1000`, ""},
		{"guard above max", on + drain + `"retention_guard_factor": 1e300`, "load.retention_guard_factor: 1e+300"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newFromJSON(`{"load": {` + tc.load + `}}`)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, affinity.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

// TestLoadKeysNeedBalanceFactor: a load key set while balance_factor is 0 (load awareness
// off) would have no effect, so it is rejected with an error naming both keys; so are the
// drain model's keys without a drain rate.
func TestLoadKeysNeedBalanceFactor(t *testing.T) {
	cases := []struct {
		load  string
		keys  []string // named in the error
		valid bool
	}{
		{`"drain_tokens_per_second": 16000`, []string{"load.drain_tokens_per_second", "load.balance_factor"}, false},
		{`"spill_cost_weight": 5`, []string{"load.spill_cost_weight", "load.balance_factor"}, false},
		{`"spill_cost_weight": 0`, []string{"load.spill_cost_weight", "load.balance_factor"}, false},
		{`"disable_spill": true`, []string{"load.disable_spill", "load.balance_factor"}, false},
		{`"queued_request_cost": 2048`, []string{"load.queued_request_cost", "load.balance_factor"}, false},
		{`"cold_cache_ratio": 0.001`, []string{"load.cold_cache_ratio", "load.balance_factor"}, false},
		{`"drain_ewma_weight": 0.1`, []string{"load.drain_ewma_weight", "load.balance_factor"}, false},
		{`"retention_guard_factor": 2.5`, []string{"load.retention_guard_factor", "load.balance_factor"}, false},
		{`"balance_factor": 0, "cold_cache_ratio": 0.001`, []string{"load.cold_cache_ratio", "load.balance_factor"}, false},
		{`"balance_factor": 1.25, "drain_ewma_weight": 0.1`, []string{"load.drain_ewma_weight", "load.drain_tokens_per_second"}, false},
		{`"balance_factor": 0, "disable_spill": false`, nil, true},
		{`"balance_factor": 1.25, "drain_tokens_per_second": 16000, "drain_ewma_weight": 0.1`, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.load, func(t *testing.T) {
			_, err := newFromJSON(`{"load": {` + tc.load + `}}`)
			if tc.valid {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, affinity.ErrInvalidConfig)
			for _, k := range tc.keys {
				assert.Contains(t, err.Error(), k)
			}
		})
	}
}

// TestConfigJSONUnknownKeys: a misspelt key at any depth is ErrInvalidConfig naming it,
// through plain json.Unmarshal and through a strict decoder of an enclosing document.
func TestConfigJSONUnknownKeys(t *testing.T) {
	cases := []struct {
		doc     string // the affinity block
		wantErr string // "" = valid
	}{
		{`{"load": {"balance_factor": 1.25}}`, ""},
		{`{"load": {"balance_fctor": 1.25}}`, `"balance_fctor"`},
		{`{"max_binding": 10}`, `"max_binding"`},
		{`{"tiers": {"gold": {"sticky_ttl": 60}}}`, `"sticky_ttl"`},
		{`{"load": {"balance_factor": 1.25, "drain_rate": 16000}}`, `"drain_rate"`},
	}
	for _, tc := range cases {
		t.Run(tc.doc, func(t *testing.T) {
			var plain affinity.Config
			errPlain := json.Unmarshal([]byte(tc.doc), &plain)
			var outer struct {
				Affinity affinity.Config `json:"affinity"`
			}
			dec := json.NewDecoder(bytes.NewReader([]byte(`{"affinity": ` + tc.doc + `}`)))
			dec.DisallowUnknownFields()
			errStrict := dec.Decode(&outer)
			for _, err := range []error{errPlain, errStrict} {
				if tc.wantErr == "" {
					require.NoError(t, err)
					continue
				}
				require.ErrorIs(t, err, affinity.ErrInvalidConfig)
				assert.Contains(t, err.Error(), tc.wantErr)
			}
		})
	}
}

// TestLoadViewSaturates: reported queues of any size make a backend look busy (at most
// MaxLoadView), never idle or negative.
func TestLoadViewSaturates(t *testing.T) {
	cases := []struct {
		name       string
		queuedCost int64
		report     affinity.BackendLoad
		view       int64
		reported   int64
	}{
		{"max queued cost, 2 waiting", affinity.MaxQueuedRequestCost, affinity.BackendLoad{Waiting: 2}, 2 * affinity.MaxQueuedRequestCost, 2},
		{"huge waiting", 0, affinity.BackendLoad{Waiting: math.MaxInt64}, affinity.MaxLoadView, math.MaxInt64},
		{"huge running", 0, affinity.BackendLoad{Waiting: 1, Running: math.MaxInt64}, affinity.MaxLoadView, math.MaxInt64},
		{"huge both", affinity.MaxQueuedRequestCost, affinity.BackendLoad{Waiting: math.MaxInt64, Running: math.MaxInt64}, affinity.MaxLoadView, math.MaxInt64},
		{"just below saturation", 1024, affinity.BackendLoad{Waiting: affinity.MaxLoadView / 1024}, affinity.MaxLoadView, affinity.MaxLoadView / 1024},
		{"one past saturation", 1024, affinity.BackendLoad{Waiting: affinity.MaxLoadView/1024 + 1}, affinity.MaxLoadView, affinity.MaxLoadView/1024 + 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSched(t, affinity.Config{Load: affinity.LoadConfig{BalanceFactor: 1.25, QueuedRequestCost: tc.queuedCost}})
			require.NoError(t, s.ReportLoad("a", tc.report))
			assert.Equal(t, tc.view, s.LoadView("a"))
			assert.Equal(t, tc.reported, s.Load("a").Reported)
			// A new session avoids the saturated backend.
			bs := []affinity.Backend{affinity.MustBackend("a", "", 1), affinity.MustBackend("b", "", 1)}
			for i := range 8 {
				l, err := acquire(s, fmt.Sprint("s", i), "", bs, 1000)
				require.NoError(t, err)
				assert.Equal(t, "b", l.Backend.ID())
				l.Done(affinity.DoneInfo{})
			}
		})
	}
}

// TestDrainHorizonSaturates: at the slowest drain rate, hundreds of leases at the largest
// cost push the drain horizon past the int64 range of nanoseconds; it saturates, so the
// backend stays loaded instead of wrapping around to idle.
func TestDrainHorizonSaturates(t *testing.T) {
	s, clk := newSched(t, drainCfg(1.25, 5, affinity.MinDrainTokensPerSecond, 0))
	a := []affinity.Backend{affinity.MustBackend("a", "", 1)}
	const n = 600 // 600 x 2^24 tokens at 1 s each: past 2^63 ns
	for i := range n {
		_, err := acquire(s, fmt.Sprint("s", i), "", a, math.MaxInt64)
		require.NoError(t, err)
	}
	assert.Equal(t, affinity.LoadSnapshot{Requests: n, Cost: n * affinity.MaxLeaseCost}, s.Load("a"))
	v := s.LoadView("a")
	// The horizon saturates at 2^63 ns from the start: about 9.2e9 tokens at 1 token/s.
	assert.Greater(t, v, int64(9e9), "the backend stays loaded up to the saturated horizon")
	assert.LessOrEqual(t, v, int64(n)*affinity.MaxLeaseCost)
	clk.Advance(time.Hour)
	assert.Greater(t, s.LoadView("a"), int64(0), "an hour drains 3600 tokens, not everything")
	assert.Equal(t, affinity.MinDrainTokensPerSecond, s.Drain("a").TokensPerSecond)
}

// TestColdCacheRatioPrecision: cold_cache_ratio is used at full precision (no rounding to
// thousandths), and usage of any size is judged without overflow.
func TestColdCacheRatioPrecision(t *testing.T) {
	bs := backendsN(4)
	cases := []struct {
		name           string
		prompt, cached int64
		want           affinity.Outcome
	}{
		{"cached at the ratio is cold", 10000, 4, affinity.OutcomeSpill},
		{"cached above the ratio is warm", 10000, 5, affinity.OutcomeHit},
		{"nothing cached is cold", 10000, 0, affinity.OutcomeSpill},
		{"huge usage fully cached is warm", math.MaxInt64, math.MaxInt64, affinity.OutcomeHit},
		{"huge usage nothing cached is cold", math.MaxInt64, 0, affinity.OutcomeSpill},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadCfg(1.5, 100) // a warm 10,000-token prefix outweighs 1e6 tokens of queue
			cfg.Load.ColdCacheRatio = 0.0004
			s, _ := newSched(t, cfg)
			l, err := acquire(s, "sess", "", bs, 10000)
			require.NoError(t, err)
			home := l.Backend
			l.Done(affinity.DoneInfo{PromptTokens: 10000, CacheReported: true})
			l, err = acquire(s, "sess", "", bs, 10000)
			require.NoError(t, err)
			require.Equal(t, affinity.OutcomeHit, l.Outcome)
			l.Done(affinity.DoneInfo{PromptTokens: tc.prompt, CachedPromptTokens: tc.cached, CacheReported: true})
			_, err = acquire(s, "pile", "", []affinity.Backend{home}, 50000)
			require.NoError(t, err)
			l, err = acquire(s, "sess", "", bs, 10000)
			require.NoError(t, err)
			assert.Equal(t, tc.want, l.Outcome)
		})
	}
}
