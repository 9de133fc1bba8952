package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// retiringGateway is a gateway over two backends that are never contacted, and a
// function returning its config with sticky_ttl_seconds ttl (a new ttl: a reload that
// replaces the Scheduler).
func retiringGateway(t *testing.T) (*Gateway, func(ttl int64) Config) {
	t.Helper()
	cfg := func(ttl int64) Config {
		c := Config{
			Backends: []BackendConfig{{ID: "a", URL: "http://a.test"}, {ID: "b", URL: "http://b.test"}},
			Health:   HealthConfig{Enabled: new(false)},
		}
		c.Affinity.StickyTTLSeconds = new(ttl)
		return c
	}
	g, err := New(cfg(60))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g, cfg
}

func (r *retiring) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lives)
}

// A retired Scheduler is kept while a request pins it — one that started before the
// reload and leases after it, as a request whose body was still arriving does — and
// while it holds a lease; it is dropped once neither is left. Reloads without requests
// in flight keep nothing; one that keeps the Scheduler shares its life.
func TestRetiredSchedulerKeptWhileBusy(t *testing.T) {
	g, cfg := retiringGateway(t)
	rt := g.pin() // the request has started on the first Scheduler
	require.NoError(t, g.Reload(cfg(120)))
	assert.Equal(t, []any{rt.sched}, anys(g.pruneRetired()), "pinned: kept")

	st := &route{rt: rt, key: "k"}
	_, _, err := st.choose() // it leases on its own (retired) Scheduler
	require.NoError(t, err)
	rt.unpin()
	assert.Len(t, g.pruneRetired(), 1, "leased: kept")

	st.release(usage{}, nil)
	assert.Empty(t, g.pruneRetired(), "idle: dropped")
	assert.Zero(t, g.retired.len())

	for i := range 50 {
		require.NoError(t, g.Reload(cfg(int64(200+i))))
		assert.Zero(t, g.retired.len(), "reload %d: nothing in flight, nothing kept", i)
	}
	before := g.state().life
	pinned := g.pin() // a request on the snapshot with both backends, not leased yet
	c := cfg(249)
	c.Backends = c.Backends[:1]
	require.NoError(t, g.Reload(c))
	assert.Same(t, before, g.state().life, "the same Scheduler, the same life")
	assert.ElementsMatch(t, []string{"a", "b"}, before.backendIDs(), "the pinned request may still lease on either backend")
	pinned.unpin()
	c.Backends = append(c.Backends, BackendConfig{ID: "c", URL: "http://c.test"})
	require.NoError(t, g.Reload(c))
	assert.Same(t, before, g.state().life)
	assert.ElementsMatch(t, []string{"a", "c"}, before.backendIDs(), "b: no pin, no lease, not configured: dropped")
}

func anys[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// Requests and reloads at once: every lease is ended, so once they are all done no
// retired Scheduler is kept, no pin is left, and every gauge is 0 (run with -race).
func TestRetiringUnderConcurrentReloads(t *testing.T) {
	g, cfg := retiringGateway(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`))
				r.Header.Set("X-Session-ID", string(rune('a'+w))+strings.Repeat("x", i%7))
				d, err := g.Decide(r, []byte(`{}`), nil)
				if !assert.NoError(t, err) {
					return
				}
				ids, loads := g.outstanding() // as a scrape would, between the lease and its end
				for j, id := range ids {
					if id == d.BackendID {
						assert.Positive(t, loads[j].Requests, "an open lease is counted")
					}
				}
				d.Done()
			}
		})
	}
	for i := range 200 {
		require.NoError(t, g.Reload(cfg(int64(61+i))))
		g.pruneRetired()
	}
	close(stop)
	wg.Wait()
	assert.Empty(t, g.pruneRetired())
	assert.Zero(t, g.state().pins.Load(), "no pin left")
	for _, b := range g.state().backends {
		assert.Zero(t, g.state().sched.Load(b.id).Requests)
	}
}
