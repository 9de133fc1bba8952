package health_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/health"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStateString(t *testing.T) {
	tests := []struct {
		s     health.State
		want  string
		valid bool
	}{
		{health.Healthy, "healthy", true},
		{health.Draining, "draining", true},
		{health.Down, "down", true},
		{3, "State(3)", false},
		{255, "State(255)", false},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.s.String())
			assert.Equal(t, tt.valid, tt.s.Valid())
		})
	}
	var zero health.State
	assert.Equal(t, health.Healthy, zero, "Healthy is the zero value")
}

func TestParseState(t *testing.T) {
	tests := []struct {
		text    string
		want    health.State
		wantErr bool
	}{
		{"healthy", health.Healthy, false},
		{"draining", health.Draining, false},
		{"down", health.Down, false},
		{"DOWN", health.Down, false},
		{"  Draining\n", health.Draining, false},
		{"", health.Healthy, true},
		{"up", health.Healthy, true},
		{"unhealthy", health.Healthy, true},
		{"State(3)", health.Healthy, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.text), func(t *testing.T) {
			got, err := health.ParseState(tt.text)
			if tt.wantErr {
				require.ErrorIs(t, err, health.ErrUnknownState)
				assert.Contains(t, err.Error(), fmt.Sprintf("%q", tt.text))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestStateText(t *testing.T) {
	type doc struct {
		States map[string]health.State `json:"states"`
	}
	in := doc{States: map[string]health.State{"a": health.Down, "b": health.Draining, "c": health.Healthy}}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	assert.JSONEq(t, `{"states":{"a":"down","b":"draining","c":"healthy"}}`, string(b))

	var out doc
	require.NoError(t, json.Unmarshal(b, &out))
	assert.Equal(t, in, out)

	err = json.Unmarshal([]byte(`{"states":{"a":"dead"}}`), &out)
	require.ErrorIs(t, err, health.ErrUnknownState)

	_, err = json.Marshal(map[string]health.State{"x": 7})
	require.ErrorIs(t, err, health.ErrUnknownState)
}

func TestTransitionString(t *testing.T) {
	tr := health.Transition{ID: "vllm-0", From: health.Healthy, To: health.Down}
	assert.Equal(t, "vllm-0: healthy -> down", tr.String())
}

func TestSetZeroValue(t *testing.T) {
	for name, s := range map[string]*health.Set{"zero": new(health.Set), "NewSet": health.NewSet()} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, health.Healthy, s.State("never-seen"))
			assert.True(t, s.AllHealthy())
			assert.Equal(t, map[string]health.State{}, s.Snapshot())
		})
	}
}

type op struct {
	id          string
	to          health.State
	wantFrom    health.State
	wantChanged bool
}

func TestSetSemantics(t *testing.T) {
	tests := []struct {
		name        string
		ops         []op
		wantSnap    map[string]health.State
		wantAll     bool
		wantDeliver []health.Transition
	}{
		{
			name:        "healthy to healthy is a no-op",
			ops:         []op{{"a", health.Healthy, health.Healthy, false}},
			wantSnap:    map[string]health.State{},
			wantAll:     true,
			wantDeliver: nil,
		},
		{
			name: "down then up",
			ops: []op{
				{"a", health.Down, health.Healthy, true},
				{"a", health.Down, health.Down, false},
				{"a", health.Healthy, health.Down, true},
			},
			wantSnap: map[string]health.State{},
			wantAll:  true,
			wantDeliver: []health.Transition{
				{ID: "a", From: health.Healthy, To: health.Down},
				{ID: "a", From: health.Down, To: health.Healthy},
			},
		},
		{
			name: "draining to down keeps other ids",
			ops: []op{
				{"a", health.Draining, health.Healthy, true},
				{"b", health.Down, health.Healthy, true},
				{"a", health.Down, health.Draining, true},
				{"c", health.Healthy, health.Healthy, false},
				{"b", health.Draining, health.Down, true},
			},
			wantSnap: map[string]health.State{"a": health.Down, "b": health.Draining},
			wantAll:  false,
			wantDeliver: []health.Transition{
				{ID: "a", From: health.Healthy, To: health.Draining},
				{ID: "b", From: health.Healthy, To: health.Down},
				{ID: "a", From: health.Draining, To: health.Down},
				{ID: "b", From: health.Down, To: health.Draining},
			},
		},
		{
			name: "invalid state is ignored",
			ops: []op{
				{"a", health.Down, health.Healthy, true},
				{"a", health.State(9), health.Down, false},
				{"b", health.State(3), health.Healthy, false},
			},
			wantSnap:    map[string]health.State{"a": health.Down},
			wantDeliver: []health.Transition{{ID: "a", From: health.Healthy, To: health.Down}},
		},
		{
			name: "empty id is an ordinary key",
			ops: []op{
				{"", health.Down, health.Healthy, true},
			},
			wantSnap:    map[string]health.State{"": health.Down},
			wantDeliver: []health.Transition{{ID: "", From: health.Healthy, To: health.Down}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s health.Set
			var got []health.Transition
			s.Subscribe(func(tr health.Transition) { got = append(got, tr) })
			for i, o := range tt.ops {
				from, changed := s.Set(o.id, o.to)
				assert.Equal(t, o.wantFrom, from, "op %d from", i)
				assert.Equal(t, o.wantChanged, changed, "op %d changed", i)
			}
			assert.Equal(t, tt.wantSnap, s.Snapshot())
			assert.Equal(t, tt.wantAll, s.AllHealthy())
			for id, st := range tt.wantSnap {
				assert.Equal(t, st, s.State(id), "State(%q)", id)
			}
			assert.Equal(t, tt.wantDeliver, got)
		})
	}
}

func TestSetMarkHelpers(t *testing.T) {
	var s health.Set
	steps := []struct {
		name string
		fn   func(string) bool
		want bool
		then health.State
	}{
		{"MarkUp on healthy", s.MarkUp, false, health.Healthy},
		{"MarkDraining", s.MarkDraining, true, health.Draining},
		{"MarkDraining again", s.MarkDraining, false, health.Draining},
		{"MarkDown", s.MarkDown, true, health.Down},
		{"MarkDown again", s.MarkDown, false, health.Down},
		{"MarkUp keeps the drain", s.MarkUp, true, health.Draining},
		{"MarkUp again", s.MarkUp, false, health.Draining},
		{"Undrain", s.Undrain, true, health.Healthy},
		{"Undrain again", s.Undrain, false, health.Healthy},
		{"MarkDown after undrain", s.MarkDown, true, health.Down},
		{"MarkUp", s.MarkUp, true, health.Healthy},
	}
	for _, st := range steps {
		assert.Equal(t, st.want, st.fn("b1"), st.name)
		assert.Equal(t, st.then, s.State("b1"), st.name)
	}
}

func TestSetSnapshotIsACopy(t *testing.T) {
	var s health.Set
	s.MarkDown("a")
	snap := s.Snapshot()
	snap["a"] = health.Healthy
	snap["b"] = health.Down
	assert.Equal(t, map[string]health.State{"a": health.Down}, s.Snapshot())
	assert.Equal(t, health.Healthy, s.State("b"))

	s.MarkDraining("c")
	assert.Len(t, snap, 2, "an earlier snapshot does not change")
}

func TestSetReadsDoNotAllocate(t *testing.T) {
	var s health.Set
	assert.Equal(t, 0.0, testing.AllocsPerRun(100, func() { _ = s.State("x") }))
	s.MarkDown("a")
	s.MarkDraining("b")
	assert.Equal(t, 0.0, testing.AllocsPerRun(100, func() {
		_ = s.State("a")
		_ = s.State("zzz")
		_ = s.AllHealthy()
	}))
	assert.Equal(t, 0.0, testing.AllocsPerRun(100, func() { s.MarkDown("a") }), "a no-op write does not allocate")
}

func TestVersion(t *testing.T) {
	s := health.NewSet()
	require.Equal(t, uint64(0), s.Version(), "no write yet")
	steps := []struct {
		name    string
		write   func() bool
		changes bool
	}{
		{"drain", func() bool { return s.Drain("a") }, true},
		{"drain again (no change)", func() bool { return s.Drain("a") }, false},
		{"down while drained", func() bool { return s.MarkDown("a") }, true},
		{"undrain", func() bool { return s.Undrain("a") }, true},
		{"forget: all Healthy", func() bool { return s.Forget("a") }, true},
		{"forget again (no change)", func() bool { return s.Forget("a") }, false},
	}
	for _, st := range steps {
		before := s.Version()
		st.write()
		assert.Equal(t, st.changes, s.Version() != before, st.name)
	}
}
