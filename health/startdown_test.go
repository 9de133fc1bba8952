package health_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/health"
)

// WithStartDown: a target a replaced Prober held Down starts Down in the new one and
// rises only after SuccessThreshold successes — one transition to observers and one
// verdict to reporters then, nothing at start. (Before: a new Prober started every
// target Healthy, so a reload declared a dead backend healthy.)
func TestProberWithStartDown(t *testing.T) {
	tests := []struct {
		name      string
		healthy   bool // b's /health
		startDown []string
		rounds    int
		wantState health.State
		wantTrans []health.Transition
		wantRep   []string
	}{
		{"held down, recovers after the rise checks", true, []string{"b"}, 3, health.Healthy,
			[]health.Transition{{ID: "b", From: health.Down, To: health.Healthy}}, []string{"b up"}},
		{"held down, one success is not enough", true, []string{"b"}, 2, health.Down, nil, nil},
		{"held down, still failing: nothing reported", false, []string{"b"}, 4, health.Down, nil, nil},
		{"unknown IDs ignored", true, []string{"nope", ""}, 0, health.Healthy, nil, nil},
		{"no option: starts Healthy, first success reported", true, nil, 1, health.Healthy, nil, []string{"b up"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, tt.healthy)
			obs := &observer{}
			var mu sync.Mutex
			var reps []string
			p, err := health.NewProber(health.ProbeConfig{FailureThreshold: 2, SuccessThreshold: 3},
				[]health.Target{{ID: "a", URL: newBackend(t, true).srv.URL}, {ID: "b", URL: b.srv.URL}},
				health.WithObserver(obs.observe), health.WithStartDown(tt.startDown...),
				health.WithReporter(func(id string, ok bool) {
					if id != "b" {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					reps = append(reps, map[bool]string{true: "b up", false: "b down"}[ok])
				}))
			require.NoError(t, err)
			if len(tt.startDown) > 0 && tt.startDown[0] == "b" {
				assert.Equal(t, health.Down, p.State("b"), "Down from the start")
			}
			for range tt.rounds {
				p.ProbeOnce(context.Background())
			}
			assert.Equal(t, tt.wantState, p.State("b"))
			assert.Equal(t, health.Healthy, p.State("a"), "other targets untouched")
			assert.Equal(t, tt.wantTrans, obs.transitions())
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, tt.wantRep, reps)
		})
	}
}
