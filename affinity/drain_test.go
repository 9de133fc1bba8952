package affinity_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// Drain is operator intent, health is observation: a drained backend that fails and then
// passes its checks is Draining again — it keeps taking no new sessions — whichever way
// the checks arrive; only Undrain ends the drain.
func TestDrainOutlastsHealthChecks(t *testing.T) {
	type way struct {
		name       string
		down, up   func(s *affinity.Scheduler, id string)
		wantBroken bool // the way down drops the bindings at once (OnBackendDown)
	}
	ways := []way{
		{"OnBackendDown/OnBackendUp", func(s *affinity.Scheduler, id string) { s.OnBackendDown(id) },
			func(s *affinity.Scheduler, id string) { s.OnBackendUp(id) }, true},
		{"Observe (a health.Prober reporter)", func(s *affinity.Scheduler, id string) { s.Observe(id, false) },
			func(s *affinity.Scheduler, id string) { s.Observe(id, true) }, true},
		{"OnHealthChange (a health.Prober observer)", func(s *affinity.Scheduler, id string) {
			s.OnHealthChange(health.Transition{ID: id, From: health.Healthy, To: health.Down})
		}, func(s *affinity.Scheduler, id string) {
			s.OnHealthChange(health.Transition{ID: id, From: health.Down, To: health.Healthy})
		}, true},
		{"the shared health.Set (MarkDown/MarkUp)", func(s *affinity.Scheduler, id string) { s.Health().MarkDown(id) },
			func(s *affinity.Scheduler, id string) { s.Health().MarkUp(id) }, false},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			f := newFixture(t, affinity.Config{})
			bs := backends(t, 4)
			d := bs[0].ID()
			kept := sessionOn(t, "k", d, bs)
			_, _ = f.sel(t, kept, "", bs)
			f.s.OnBackendDraining(d)
			assert.Equal(t, health.Draining, f.s.Health().State(d))

			w.down(f.s, d)
			assert.Equal(t, health.Down, f.s.Health().State(d))
			if w.wantBroken {
				assert.Equal(t, uint64(1), f.s.Stats().Broken.Down, "the draining backend's binding broke when it went down")
			}
			w.up(f.s, d)
			assert.Equal(t, health.Draining, f.s.Health().State(d), "passing checks do not end a drain")
			assert.True(t, f.s.Health().Drained(d))

			fresh := sessionOn(t, "f", d, bs) // HRW would pick d
			got, hit := f.sel(t, fresh, "", bs)
			assert.False(t, hit)
			assert.NotEqual(t, d, got, "a drained backend takes no new session after coming back")
			assert.Equal(t, hrwWinner(fresh, bs[1:]), got)

			f.s.Undrain(d)
			assert.Equal(t, health.Healthy, f.s.Health().State(d), "only Undrain ends the drain")
			fresh2 := sessionOn(t, "g", d, bs)
			got, _ = f.sel(t, fresh2, "", bs)
			assert.Equal(t, d, got, "undrained: new sessions land on it by HRW again")
		})
	}
}

// Undrain of a backend that is observed down leaves it Down; it comes back Healthy.
func TestUndrainWhileDown(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	f.s.OnBackendDraining("b")
	f.s.OnBackendDown("b")
	f.s.Undrain("b")
	assert.Equal(t, health.Down, f.s.Health().State("b"))
	f.s.OnBackendUp("b")
	assert.Equal(t, health.Healthy, f.s.Health().State("b"))
}

// OnHealthChange relays another health.Set: its explicit undrain (Draining -> Healthy)
// ends the drain here too; Down -> Draining (the source's drained backend came back) is
// an observation up plus a drain.
func TestOnHealthChangeRelaysASet(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	var src health.Set
	src.Subscribe(f.s.OnHealthChange)
	steps := []struct {
		name string
		do   func()
		want health.State
	}{
		{"drain", func() { src.Drain("b") }, health.Draining},
		{"down", func() { src.Observe("b", false) }, health.Down},
		{"up", func() { src.Observe("b", true) }, health.Draining},
		{"undrain", func() { src.Undrain("b") }, health.Healthy},
		{"down again", func() { src.Observe("b", false) }, health.Down},
		{"up again", func() { src.Observe("b", true) }, health.Healthy},
	}
	for _, st := range steps {
		st.do()
		assert.Equal(t, st.want, src.State("b"), "%s: source", st.name)
		assert.Equal(t, st.want, f.s.Health().State("b"), "%s: scheduler", st.name)
	}
}
