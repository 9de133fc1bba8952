package health_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/health"
)

func TestProberCancelledRoundIsNotCounted(t *testing.T) {
	b := newBackend(t, false)
	var obs observer
	p, err := health.NewProber(health.ProbeConfig{FailureThreshold: 1},
		[]health.Target{{ID: "b", URL: b.srv.URL}}, health.WithObserver(obs.observe))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.ProbeOnce(ctx)
	assert.Empty(t, obs.transitions(), "failures caused by a done ctx are not counted")
	assert.Equal(t, health.Healthy, p.State("b"))
	assert.Equal(t, int64(0), b.requests.Load())
}

func TestProberRunWithTicks(t *testing.T) {
	b := newBackend(t, false)
	var obs observer
	ticks := make(chan time.Time) // unbuffered: a send returns once Run is waiting again
	p, err := health.NewProber(health.ProbeConfig{FailureThreshold: 3, SuccessThreshold: 2},
		[]health.Target{{ID: "b", URL: b.srv.URL}},
		health.WithObserver(obs.observe), health.WithTicks(ticks))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	// Run probes once at start, then once per tick. The k-th send returns when Run is
	// waiting for the next tick, so rounds 1..k have finished; round k+1 may be running.
	send := func() { ticks <- time.Time{} }
	send() // rounds 1 done (failure)
	assert.Contains(t, []int64{1, 2}, b.requests.Load())
	assert.Empty(t, obs.transitions(), "at most 2 failures so far")
	send()
	send() // rounds 1-3 done: 3 consecutive failures
	assert.Equal(t, []health.Transition{down("b")}, obs.transitions())
	assert.Equal(t, health.Down, p.State("b"))

	b.healthy.Store(true) // round 4 may have started before this: success or failure
	send()
	send()
	send() // rounds 5 and 6 started after the flip: 2 consecutive successes
	assert.Equal(t, []health.Transition{down("b"), up("b")}, obs.transitions())
	assert.Equal(t, health.Healthy, p.State("b"))

	cancel()
	require.NoError(t, <-done, "Run returns nil when ctx is cancelled")
	assert.Contains(t, []int64{6, 7}, b.requests.Load())
	assert.Equal(t, []health.Transition{down("b"), up("b")}, obs.transitions())
}

func TestProberRunStops(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, p func(...health.ProberOption) *health.Prober, b *backend) error
		reqs int64
	}{
		{
			name: "ctx already done: no round",
			run: func(t *testing.T, newP func(...health.ProberOption) *health.Prober, b *backend) error {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return newP().Run(ctx)
			},
			reqs: 0,
		},
		{
			name: "tick channel closed",
			run: func(t *testing.T, newP func(...health.ProberOption) *health.Prober, b *backend) error {
				ticks := make(chan time.Time)
				close(ticks)
				return newP(health.WithTicks(ticks)).Run(context.Background())
			},
			reqs: 1,
		},
		{
			name: "own ticker, cancelled after the first round",
			run: func(t *testing.T, newP func(...health.ProberOption) *health.Prober, b *backend) error {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				p := newP() // own ticker, interval 1 h: no second round before cancel
				go func() { done <- p.Run(ctx) }()
				<-b.paths // the immediate first round reached the server
				cancel()
				return <-done
			},
			reqs: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, true)
			newP := func(opts ...health.ProberOption) *health.Prober {
				p, err := health.NewProber(health.ProbeConfig{IntervalSeconds: 3600},
					[]health.Target{{ID: "b", URL: b.srv.URL}}, opts...)
				require.NoError(t, err)
				return p
			}
			assert.NoError(t, tt.run(t, newP, b))
			assert.Equal(t, tt.reqs, b.requests.Load())
		})
	}
}
