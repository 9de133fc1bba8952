package health_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/health"
)

// Observed health and the operator's drain are separate facts; the effective state is
// Down if observed down, else Draining if drained, else Healthy. Only Undrain (or Set
// Healthy, or Forget) ends a drain.
func TestSetDrainIsOperatorIntent(t *testing.T) {
	type step struct {
		name        string
		do          func(s *health.Set) bool
		wantChanged bool
		want        health.State
		wantUp      bool // ObservedUp
		wantDrained bool
	}
	observe := func(up bool) func(*health.Set) bool {
		return func(s *health.Set) bool { return s.Observe("b", up) }
	}
	drain := func(s *health.Set) bool { return s.Drain("b") }
	undrain := func(s *health.Set) bool { return s.Undrain("b") }
	tests := []struct {
		name  string
		steps []step
		// transitions delivered to a subscriber over all steps
		wantDelivered []health.Transition
	}{
		{
			name: "drained backend fails then passes its checks: stays draining",
			steps: []step{
				{"drain", drain, true, health.Draining, true, true},
				{"probe fails", observe(false), true, health.Down, false, true},
				{"probe passes", observe(true), true, health.Draining, true, true},
				{"probe passes again", observe(true), false, health.Draining, true, true},
				{"undrain", undrain, true, health.Healthy, true, false},
			},
			wantDelivered: []health.Transition{
				{ID: "b", From: health.Healthy, To: health.Draining},
				{ID: "b", From: health.Draining, To: health.Down},
				{ID: "b", From: health.Down, To: health.Draining},
				{ID: "b", From: health.Draining, To: health.Healthy},
			},
		},
		{
			name: "drain while down is remembered, no transition until it comes back",
			steps: []step{
				{"probe fails", observe(false), true, health.Down, false, false},
				{"drain", drain, true, health.Down, false, true},
				{"drain again", drain, false, health.Down, false, true},
				{"probe passes", observe(true), true, health.Draining, true, true},
			},
			wantDelivered: []health.Transition{
				{ID: "b", From: health.Healthy, To: health.Down},
				{ID: "b", From: health.Down, To: health.Draining},
			},
		},
		{
			name: "undrain while down stays down, comes back healthy",
			steps: []step{
				{"drain", drain, true, health.Draining, true, true},
				{"probe fails", observe(false), true, health.Down, false, true},
				{"undrain", undrain, true, health.Down, false, false},
				{"undrain again", undrain, false, health.Down, false, false},
				{"probe passes", observe(true), true, health.Healthy, true, false},
			},
			wantDelivered: []health.Transition{
				{ID: "b", From: health.Healthy, To: health.Draining},
				{ID: "b", From: health.Draining, To: health.Down},
				{ID: "b", From: health.Down, To: health.Healthy},
			},
		},
		{
			name: "legacy MarkUp is an observation, MarkDraining a drain",
			steps: []step{
				{"MarkDraining", func(s *health.Set) bool { return s.MarkDraining("b") }, true, health.Draining, true, true},
				{"MarkDown", func(s *health.Set) bool { return s.MarkDown("b") }, true, health.Down, false, true},
				{"MarkUp", func(s *health.Set) bool { return s.MarkUp("b") }, true, health.Draining, true, true},
			},
			wantDelivered: []health.Transition{
				{ID: "b", From: health.Healthy, To: health.Draining},
				{ID: "b", From: health.Draining, To: health.Down},
				{ID: "b", From: health.Down, To: health.Draining},
			},
		},
		{
			name: "Set Healthy forces: observed up and undrained",
			steps: []step{
				{"drain", drain, true, health.Draining, true, true},
				{"probe fails", observe(false), true, health.Down, false, true},
				{"Set Healthy", func(s *health.Set) bool { _, c := s.Set("b", health.Healthy); return c }, true, health.Healthy, true, false},
				{"Set Down keeps no drain", func(s *health.Set) bool { _, c := s.Set("b", health.Down); return c }, true, health.Down, false, false},
				{"Set Draining: up and drained", func(s *health.Set) bool { _, c := s.Set("b", health.Draining); return c }, true, health.Draining, true, true},
			},
			wantDelivered: []health.Transition{
				{ID: "b", From: health.Healthy, To: health.Draining},
				{ID: "b", From: health.Draining, To: health.Down},
				{ID: "b", From: health.Down, To: health.Healthy},
				{ID: "b", From: health.Healthy, To: health.Down},
				{ID: "b", From: health.Down, To: health.Draining},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s health.Set
			var got []health.Transition
			s.Subscribe(func(tr health.Transition) { got = append(got, tr) })
			for _, st := range tt.steps {
				assert.Equal(t, st.wantChanged, st.do(&s), "%s: changed", st.name)
				assert.Equal(t, st.want, s.State("b"), "%s: state", st.name)
				assert.Equal(t, st.wantUp, s.ObservedUp("b"), "%s: observed up", st.name)
				assert.Equal(t, st.wantDrained, s.Drained("b"), "%s: drained", st.name)
				assert.Equal(t, st.want == health.Healthy, s.AllHealthy(), "%s: AllHealthy", st.name)
			}
			assert.Equal(t, tt.wantDelivered, got)
		})
	}
}

func TestSetForgetAndRetain(t *testing.T) {
	var s health.Set
	var got []health.Transition
	s.Subscribe(func(tr health.Transition) { got = append(got, tr) })
	s.MarkDown("gone-down")
	s.Drain("gone-drained")
	s.MarkDown("kept")
	s.Drain("kept")
	s.Drain("kept-drained")
	got = nil

	assert.Equal(t, 2, s.Retain([]string{"kept", "kept-drained", "never-marked"}))
	assert.Equal(t, map[string]health.State{"kept": health.Down, "kept-drained": health.Draining}, s.Snapshot())
	assert.True(t, s.Drained("kept"), "a kept ID keeps both facts")
	assert.False(t, s.ObservedUp("kept"))
	assert.True(t, s.ObservedUp("gone-down"), "a forgotten ID is unknown: observed up, not drained")
	assert.False(t, s.Drained("gone-drained"))
	assert.Equal(t, []health.Transition{
		{ID: "gone-down", From: health.Down, To: health.Healthy},
		{ID: "gone-drained", From: health.Draining, To: health.Healthy},
	}, got, "forgotten IDs are delivered as transitions to Healthy, in ID order")

	assert.Equal(t, 0, s.Retain([]string{"kept", "kept-drained"}), "nothing left to forget")
	assert.True(t, s.Forget("kept"))
	assert.False(t, s.Forget("kept"), "Forget is idempotent")
	assert.Equal(t, 1, s.Retain(nil), "Retain(nil) forgets everything")
	assert.True(t, s.AllHealthy())
	assert.Equal(t, 0, s.Retain(nil))
}

// Retain is one write however many IDs it forgets: Version moves once, and a subscriber
// still gets one transition per forgotten ID (tester37 finding 5: it was one write per
// ID, each copying the map, 3.5 s for 5,000 IDs).
func TestSetRetainIsOneWrite(t *testing.T) {
	var s health.Set
	var got []string
	s.Subscribe(func(tr health.Transition) { got = append(got, tr.ID) })
	for _, id := range []string{"c", "a", "b", "kept"} {
		s.MarkDown(id)
	}
	got = nil
	v := s.Version()
	assert.Equal(t, 3, s.Retain([]string{"kept"}))
	assert.Equal(t, v+1, s.Version(), "one write")
	assert.Equal(t, []string{"a", "b", "c"}, got)
	assert.Equal(t, map[string]health.State{"kept": health.Down}, s.Snapshot())
	assert.Equal(t, 1, s.Retain(nil))
	assert.Equal(t, v+2, s.Version())
	assert.True(t, s.AllHealthy())
}

func TestSetAdminReadsDoNotAllocate(t *testing.T) {
	var s health.Set
	s.MarkDown("a")
	s.Drain("b")
	require.Equal(t, 0.0, testing.AllocsPerRun(100, func() {
		_ = s.ObservedUp("a")
		_ = s.Drained("b")
		_ = s.State("zzz")
	}))
	require.Equal(t, 0.0, testing.AllocsPerRun(100, func() {
		s.Drain("b")
		s.Observe("a", false)
	}), "no-op writes do not allocate")
}
