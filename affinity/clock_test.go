package affinity_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

var (
	_ affinity.Clock = (*affinitytest.Clock)(nil)
	_ affinity.Clock = (*affinity.CoarseClock)(nil)
	_ affinity.Clock = affinity.ClockFunc(time.Now)
)

func TestCoarseClock(t *testing.T) {
	assert.Panics(t, func() { affinity.NewCoarseClock(0) })
	c := affinity.NewCoarseClock(time.Millisecond)
	start := c.Now()
	assert.Equal(t, start, c.Now(), "stands still until Run")

	s, err := affinity.New(affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(1)}, affinity.WithClock(c))
	require.NoError(t, err)
	bs := backends(t, 3)
	_, hit, err := s.SelectBackend("s", "", bs)
	require.NoError(t, err)
	require.False(t, hit)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	require.Eventually(t, func() bool { return c.Now().After(start) }, 5*time.Second, time.Millisecond)
	_, hit, err = s.SelectBackend("s", "", bs)
	require.NoError(t, err)
	assert.True(t, hit)
	// The hit slid lastUse to the clock's value at that call, which is no later than
	// hitAt: wait one TTL from hitAt, not from start (the clock may have ticked several
	// times between start and the hit on a loaded machine).
	hitAt := c.Now()
	require.Eventually(t, func() bool { return c.Now().Sub(hitAt) >= time.Second }, 10*time.Second, 5*time.Millisecond)
	_, ok := s.Lookup("s", "")
	assert.False(t, ok, "expired on the coarse clock too")

	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	stopped := c.Now()
	assert.Equal(t, stopped, c.Now(), "stands still after Run returns")
}

func TestCoarseClockRunTwice(t *testing.T) {
	c := affinity.NewCoarseClock(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	// One of the two Run calls returns an error at once; cancel stops the other.
	second := make(chan error)
	go func() { second <- c.Run(ctx) }()
	var errs []error
	select {
	case err := <-done:
		errs = append(errs, err)
	case err := <-second:
		errs = append(errs, err)
	}
	cancel()
	select {
	case err := <-done:
		errs = append(errs, err)
	case err := <-second:
		errs = append(errs, err)
	}
	require.Len(t, errs, 2)
	assert.ErrorIs(t, errs[0], affinity.ErrClockRunning, "the first to return is the refused one")
	assert.ErrorIs(t, errs[1], context.Canceled)
}

func TestClockFunc(t *testing.T) {
	now := t0
	s, err := affinity.New(affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(10)},
		affinity.WithClock(affinity.ClockFunc(func() time.Time { return now })))
	require.NoError(t, err)
	bs := backends(t, 2)
	_, _, _ = s.SelectBackend("s", "", bs)
	now = now.Add(10 * time.Second)
	_, hit, _ := s.SelectBackend("s", "", bs)
	assert.False(t, hit)
}
