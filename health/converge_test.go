package health_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/health"
)

// reports collects WithReporter calls.
type reports struct {
	mu  sync.Mutex
	got []string
}

func (r *reports) report(id string, healthy bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if healthy {
		r.got = append(r.got, id+" up")
	} else {
		r.got = append(r.got, id+" down")
	}
}

func (r *reports) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

// The first verdict on every target is reported (a success at once, a failure after
// FailureThreshold rounds), then only changes.
func TestProberReporterFirstVerdictThenChanges(t *testing.T) {
	ok, bad := newBackend(t, true), newBackend(t, false)
	var r reports
	var o observer
	p, err := health.NewProber(health.ProbeConfig{}, []health.Target{
		{ID: "ok", URL: ok.srv.URL}, {ID: "bad", URL: bad.srv.URL},
	}, health.WithReporter(r.report), health.WithObserver(o.observe))
	require.NoError(t, err)
	ctx := context.Background()

	rounds := []struct {
		name      string
		okHealthy bool
		want      []string
	}{
		{"round 1: the first success is a verdict", true, []string{"ok up"}},
		{"round 2: nothing changed", true, nil},
		{"round 3: bad reaches the failure threshold", true, []string{"bad down"}},
		{"round 4: ok fails once", false, nil},
		{"round 5: ok fails twice", false, nil},
		{"round 6: ok fails three times", false, []string{"ok down"}},
		{"round 7: one success is not enough once known", true, nil},
		{"round 8: two successes", true, []string{"ok up"}},
	}
	for _, rd := range rounds {
		ok.healthy.Store(rd.okHealthy)
		p.ProbeOnce(ctx)
		assert.Equal(t, rd.want, r.take(), rd.name)
	}
	assert.Equal(t, []health.Transition{down("bad"), down("ok"), up("ok")}, o.transitions(),
		"observers still see transitions from all-healthy, as before")
}

// A replacing prober brings the set to its own view: a backend the old prober held Down
// that is healthy now comes back after one round, backends no longer configured are
// forgotten, and the operator's drain survives the whole exchange.
func TestNewProberConverges(t *testing.T) {
	a, b, c := newBackend(t, true), newBackend(t, false), newBackend(t, false)
	var set health.Set
	observe := func(id string, healthy bool) { set.Observe(id, healthy) }
	ctx := context.Background()

	old, err := health.NewProber(health.ProbeConfig{}, []health.Target{
		{ID: "a", URL: a.srv.URL}, {ID: "b", URL: b.srv.URL}, {ID: "c", URL: c.srv.URL},
	}, health.WithReporter(observe))
	require.NoError(t, err)
	for range 3 {
		old.ProbeOnce(ctx)
	}
	set.Drain("a") // operator intent
	require.Equal(t, map[string]health.State{"a": health.Draining, "b": health.Down, "c": health.Down}, set.Snapshot())

	// The checker is replaced (config reload: c removed, d added); b has recovered.
	b.healthy.Store(true)
	d := newBackend(t, true)
	targets := []health.Target{{ID: "a", URL: a.srv.URL}, {ID: "b", URL: b.srv.URL}, {ID: "d", URL: d.srv.URL}}
	ids := make([]string, len(targets))
	for i, tg := range targets {
		ids[i] = tg.ID
	}
	assert.Equal(t, 1, set.Retain(ids), "c is forgotten")
	next, err := health.NewProber(health.ProbeConfig{}, targets, health.WithReporter(observe))
	require.NoError(t, err)
	next.ProbeOnce(ctx)

	assert.Equal(t, health.Healthy, set.State("b"), "b, Down for the old prober, is healthy after one round")
	assert.Equal(t, health.Draining, set.State("a"), "a stays drained: probes never end a drain")
	assert.Equal(t, health.Healthy, set.State("c"), "c is no longer configured: no state left")
	assert.Equal(t, map[string]health.State{"a": health.Draining}, set.Snapshot())

	// With the plain transition observer the old Down of b would never clear: the new
	// prober starts from all-Healthy and has no transition to report.
	var set2 health.Set
	set2.MarkDown("b")
	legacy, err := health.NewProber(health.ProbeConfig{}, targets,
		health.WithObserver(func(tr health.Transition) { set2.Set(tr.ID, tr.To) }))
	require.NoError(t, err)
	legacy.ProbeOnce(ctx)
	assert.Equal(t, health.Down, set2.State("b"), "why WithReporter exists")
}
