package affinity_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

func FuzzConfigJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"sticky_ttl_seconds":0}`, `{"sticky_ttl_seconds":-1}`,
		`{"sticky_ttl_seconds":1e30}`, `{"max_bindings":3,"tiers":{"a":{"sticky_ttl_seconds":5}}}`,
		`{"tiers":{"":{}}}`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var cfg affinity.Config
		err := json.Unmarshal(data, &cfg)
		if err != nil {
			var se *json.SyntaxError
			require.True(t, errors.Is(err, affinity.ErrInvalidConfig) || errors.As(err, &se), "%v", err)
			return
		}
		verr := cfg.Validate()
		s, nerr := affinity.New(cfg)
		if verr != nil {
			require.ErrorIs(t, verr, affinity.ErrInvalidConfig)
			require.Equal(t, verr, nerr)
			return
		}
		require.NoError(t, nerr)
		want := affinity.DefaultStickyTTLSeconds * time.Second
		if cfg.StickyTTLSeconds != nil {
			want = time.Duration(*cfg.StickyTTLSeconds) * time.Second
		}
		_, dflt := cfg.Tiers[""]
		require.False(t, dflt, `tiers[""] is invalid`)
		require.Equal(t, want, s.Table().TTL(""))
		// Round trip.
		out, err := json.Marshal(cfg)
		require.NoError(t, err)
		var again affinity.Config
		require.NoError(t, json.Unmarshal(out, &again))
		require.NoError(t, again.Validate())
	})
}

func FuzzSelectBackend(f *testing.F) {
	f.Add("session-1", "", "b0,b1,b2", uint8(0), uint8(0))
	f.Add("s", "gold", "b0,b0,b1", uint8(1), uint8(3))
	f.Add("", "", "", uint8(0), uint8(0))
	f.Add("x", strings.Repeat("t", 300), "a,,b", uint8(2), uint8(200))
	f.Fuzz(func(t *testing.T, session, tier, ids string, down, drain uint8) {
		fx := newFixture(t, affinity.Config{MaxSessionIDBytes: 64})
		var cands []affinity.Backend
		var healthy, draining []affinity.Backend
		for i, id := range strings.Split(ids, ",") {
			if i >= 8 {
				break
			}
			b, err := affinity.NewBackend(id, "", 1)
			if err != nil {
				require.ErrorIs(t, err, affinity.ErrInvalidBackend)
				cands = append(cands, affinity.Backend{}) // a zero Backend: must be rejected
				continue
			}
			cands = append(cands, b)
			if slices.ContainsFunc(cands[:len(cands)-1], func(c affinity.Backend) bool { return c.ID() == id }) {
				continue
			}
			switch {
			case down&(1<<i) != 0:
				fx.s.Health().MarkDown(id)
			case drain&(1<<i) != 0:
				fx.s.Health().MarkDraining(id)
				draining = append(draining, b)
			default:
				healthy = append(healthy, b)
			}
		}
		before := fx.s.Stats()
		b, hit, err := fx.s.SelectBackend(session, tier, cands)
		if err != nil {
			require.True(t, errors.Is(err, affinity.ErrEmptySessionID) || errors.Is(err, affinity.ErrSessionIDTooLong) ||
				errors.Is(err, affinity.ErrTierTooLong) || errors.Is(err, affinity.ErrNoCandidates) ||
				errors.Is(err, affinity.ErrInvalidBackend) || errors.Is(err, affinity.ErrNoEligibleBackend), "%v", err)
			require.Equal(t, before, fx.s.Stats())
			require.Equal(t, 0, fx.s.Len())
			return
		}
		require.False(t, hit)
		require.NotEqual(t, health.Down, fx.s.Health().State(b.ID()))
		if len(healthy) > 0 {
			require.Equal(t, hrwWinner(session, healthy), b.ID())
		} else {
			require.Equal(t, hrwWinner(session, draining), b.ID())
		}
		b2, hit, err := fx.s.SelectBackend(session, tier, cands)
		require.NoError(t, err)
		require.True(t, hit)
		require.Equal(t, b, b2)
		require.Equal(t, 1, fx.s.OnBackendDown(b.ID()))
	})
}
