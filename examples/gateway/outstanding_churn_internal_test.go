package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// churnConfig is a config of n backends of generation gen ("g<gen>-<i>", never
// contacted); each generation replaces every backend of the others, and a reload between
// two keeps the Scheduler.
func churnConfig(gen, n int) Config {
	c := Config{Health: HealthConfig{Enabled: new(false)}}
	for i := range n {
		id := fmt.Sprintf("g%d-%d", gen, i)
		c.Backends = append(c.Backends, BackendConfig{ID: id, URL: "http://" + id + ".test"})
	}
	return c
}

// metricsBody is the gateway's /metrics page.
func metricsBody(t *testing.T, g *Gateway) string {
	t.Helper()
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

// The backend IDs a Scheduler's life tracks are those configured now, those of an older
// snapshot a request still pins, and those still leased — not every ID ever configured
// (tester37 finding 1: reloads slowed down with every ID ever seen). Reloads that each
// replace every backend leave the set at the configured size, a lease keeps its removed
// backend tracked and exported until it ends and the next reload looks, and /metrics has
// no series for an ID gone and leaseless.
func TestLifeTracksOnlyConfiguredPinnedOrLeased(t *testing.T) {
	const n = 4
	g, err := New(churnConfig(0, n))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	life := g.state().life
	tracked := func() []string { return g.state().life.backendIDs() }
	exported := func(id string) bool {
		return strings.Contains(metricsBody(t, g), MetricOutstandingRequests+`{backend="`+id+`"}`)
	}

	gen := 0
	reload := func() {
		t.Helper()
		gen++
		require.NoError(t, g.Reload(churnConfig(gen, n)))
		require.Same(t, life, g.state().life, "backends only: the Scheduler is kept")
	}
	for range 30 {
		reload()
		assert.Len(t, tracked(), n, "generation %d: only the configured backends", gen)
	}

	// A lease taken before a reload keeps its backend tracked and exported after it.
	st := &route{rt: g.pin(), key: "leased"}
	leased, _, err := st.choose()
	require.NoError(t, err)
	st.rt.unpin()
	reload()
	assert.Len(t, tracked(), n+1)
	assert.Contains(t, tracked(), leased.id)
	assert.True(t, exported(leased.id), "in flight: exported")
	st.release(usage{}, nil)
	assert.False(t, exported(leased.id), "ended: not exported")
	reload()
	assert.Len(t, tracked(), n, "ended before the reload: dropped")

	// A request pinned on a snapshot whose backends a reload removes may still lease on
	// one of them: they stay tracked while it pins, and its lease is exported.
	st = &route{rt: g.pin(), key: "pinned"}
	reload()
	assert.Len(t, tracked(), 2*n, "the pinned snapshot's backends too")
	leased, _, err = st.choose()
	require.NoError(t, err)
	assert.True(t, exported(leased.id), "leased after the reload on a removed backend: exported")
	st.rt.unpin()
	reload()
	assert.Len(t, tracked(), n+1, "unpinned: only its leased backend is left")
	st.release(usage{}, nil)
	reload()
	assert.Len(t, tracked(), n)
	body := metricsBody(t, g)
	for old := range gen {
		assert.NotContains(t, body, fmt.Sprintf(`backend="g%d-`, old), "generation %d: gone and leaseless", old)
	}
	assert.Contains(t, body, fmt.Sprintf(`%s{backend="g%d-0"}`, MetricOutstandingRequests, gen))
}
