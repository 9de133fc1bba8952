package health_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/health"
)

// backend is an httptest server whose /health answers 200 while healthy is set and 503
// otherwise.
type backend struct {
	srv      *httptest.Server
	healthy  atomic.Bool
	requests atomic.Int64
	paths    chan string // request paths (non-blocking send; extra ones are dropped)
}

func newBackend(t *testing.T, healthy bool) *backend {
	t.Helper()
	b := &backend{paths: make(chan string, 1)}
	b.healthy.Store(healthy)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		select {
		case b.paths <- r.URL.Path:
		default:
		}
		if b.healthy.Load() {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"status":"ok"}`))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// observer collects transitions; the Prober calls it one at a time, but the test reads
// it from another goroutine, so it locks.
type observer struct {
	mu  sync.Mutex
	got []health.Transition
}

func (o *observer) observe(tr health.Transition) {
	o.mu.Lock()
	o.got = append(o.got, tr)
	o.mu.Unlock()
}

func (o *observer) transitions() []health.Transition {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]health.Transition(nil), o.got...)
}

func down(id string) health.Transition {
	return health.Transition{ID: id, From: health.Healthy, To: health.Down}
}

func up(id string) health.Transition {
	return health.Transition{ID: id, From: health.Down, To: health.Healthy}
}

func TestProberThresholds(t *testing.T) {
	// Each round sets the backend's health, runs ProbeOnce and expects the transitions
	// observed in that round and the state after it.
	type round struct {
		healthy bool
		want    []health.Transition
		state   health.State
	}
	ok := func(st health.State, want ...health.Transition) round { return round{true, want, st} }
	fail := func(st health.State, want ...health.Transition) round { return round{false, want, st} }
	tests := []struct {
		name   string
		cfg    health.ProbeConfig
		rounds []round
	}{
		{
			name: "defaults: 3 failures down, 2 successes up",
			cfg:  health.ProbeConfig{},
			rounds: []round{
				ok(health.Healthy),
				fail(health.Healthy), fail(health.Healthy), fail(health.Down, down("b")),
				fail(health.Down), // stays down, no new transition
				ok(health.Down), ok(health.Healthy, up("b")),
				ok(health.Healthy),
			},
		},
		{
			name: "a success resets the failure count",
			cfg:  health.ProbeConfig{},
			rounds: []round{
				fail(health.Healthy), fail(health.Healthy), ok(health.Healthy),
				fail(health.Healthy), fail(health.Healthy), fail(health.Down, down("b")),
			},
		},
		{
			name: "a failure resets the success count",
			cfg:  health.ProbeConfig{FailureThreshold: 1, SuccessThreshold: 3},
			rounds: []round{
				fail(health.Down, down("b")),
				ok(health.Down), ok(health.Down), fail(health.Down),
				ok(health.Down), ok(health.Down), ok(health.Healthy, up("b")),
			},
		},
		{
			name: "thresholds of one flap every round",
			cfg:  health.ProbeConfig{FailureThreshold: 1, SuccessThreshold: 1},
			rounds: []round{
				fail(health.Down, down("b")), ok(health.Healthy, up("b")),
				fail(health.Down, down("b")), ok(health.Healthy, up("b")),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, true)
			var obs observer
			p, err := health.NewProber(tt.cfg, []health.Target{{ID: "b", URL: b.srv.URL}},
				health.WithObserver(obs.observe))
			require.NoError(t, err)
			var want []health.Transition
			for i, r := range tt.rounds {
				b.healthy.Store(r.healthy)
				p.ProbeOnce(context.Background())
				want = append(want, r.want...)
				require.Equal(t, want, obs.transitions(), "after round %d", i+1)
				require.Equal(t, r.state, p.State("b"), "after round %d", i+1)
			}
			assert.Equal(t, int64(len(tt.rounds)), b.requests.Load(), "one request per round")
		})
	}
}

func TestProberStatusCodes(t *testing.T) {
	tests := []struct {
		code int
		ok   bool
	}{
		{200, true},
		{204, true},
		{299, true},
		{301, false}, // redirects are not followed by the default client
		{404, false},
		{429, false},
		{500, false},
		{503, false},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.code == 301 {
					http.Redirect(w, r, "/elsewhere", tt.code)
					return
				}
				w.WriteHeader(tt.code)
			}))
			t.Cleanup(srv.Close)
			var obs observer
			p, err := health.NewProber(health.ProbeConfig{FailureThreshold: 1},
				[]health.Target{{ID: "b", URL: srv.URL}}, health.WithObserver(obs.observe))
			require.NoError(t, err)
			p.ProbeOnce(context.Background())
			if tt.ok {
				assert.Empty(t, obs.transitions())
				assert.Equal(t, health.Healthy, p.State("b"))
			} else {
				assert.Equal(t, []health.Transition{down("b")}, obs.transitions())
				assert.Equal(t, health.Down, p.State("b"))
			}
		})
	}
}

func TestProberPath(t *testing.T) {
	tests := []struct {
		name     string
		cfgPath  string
		url      string // appended to the server URL
		wantPath string
	}{
		{"default", "", "", "/health"},
		{"custom", "/healthz", "", "/healthz"},
		{"base prefix", "/ready", "/v1", "/v1/ready"},
		{"trailing slash", "", "/", "/health"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, true)
			p, err := health.NewProber(health.ProbeConfig{Path: tt.cfgPath},
				[]health.Target{{ID: "b", URL: b.srv.URL + tt.url}})
			require.NoError(t, err)
			p.ProbeOnce(context.Background())
			assert.Equal(t, tt.wantPath, <-b.paths)
		})
	}
}

func TestProberConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens on addr any more

	var obs observer
	p, err := health.NewProber(health.ProbeConfig{FailureThreshold: 2},
		[]health.Target{{ID: "gone", URL: addr}}, health.WithObserver(obs.observe))
	require.NoError(t, err)
	p.ProbeOnce(context.Background())
	assert.Equal(t, health.Healthy, p.State("gone"), "one failure is below the threshold")
	p.ProbeOnce(context.Background())
	assert.Equal(t, health.Down, p.State("gone"))
	assert.Equal(t, []health.Transition{down("gone")}, obs.transitions())
}

func TestProberTimeout(t *testing.T) {
	// The probe timeout covers the whole exchange: a backend that never answers, and one
	// that sends a 2xx head but stalls in the body, both count as failures.
	tests := []struct {
		name string
		head bool // send a 200 head and part of the body before stalling
	}{
		{"no response", false},
		{"2xx head, body stalls", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.head {
					w.WriteHeader(http.StatusOK)
					_, _ = w.Write([]byte(`{"status":`))
					w.(http.Flusher).Flush()
				}
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(release) }) // runs before srv.Close

			var obs observer
			p, err := health.NewProber(health.ProbeConfig{TimeoutSeconds: 0.05, FailureThreshold: 1},
				[]health.Target{{ID: "hung", URL: srv.URL}}, health.WithObserver(obs.observe))
			require.NoError(t, err)
			start := time.Now()
			p.ProbeOnce(context.Background())
			elapsed := time.Since(start)
			assert.Equal(t, []health.Transition{down("hung")}, obs.transitions())
			assert.Equal(t, health.Down, p.State("hung"))
			assert.Less(t, elapsed, 5*time.Second, "the round is bounded by the probe timeout")
		})
	}
}

func TestProberProbesInParallel(t *testing.T) {
	// Both handlers wait until both requests have arrived: a sequential prober would time
	// out on the first one and mark it Down.
	var arrived sync.WaitGroup
	arrived.Add(2)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait()
		w.WriteHeader(http.StatusOK)
	})
	s1 := httptest.NewServer(handler)
	t.Cleanup(s1.Close)
	s2 := httptest.NewServer(handler)
	t.Cleanup(s2.Close)

	var obs observer
	p, err := health.NewProber(health.ProbeConfig{TimeoutSeconds: 10, FailureThreshold: 1},
		[]health.Target{{ID: "a", URL: s1.URL}, {ID: "b", URL: s2.URL}}, health.WithObserver(obs.observe))
	require.NoError(t, err)
	p.ProbeOnce(context.Background())
	assert.Empty(t, obs.transitions())
}

func TestProberManyTargetsOrder(t *testing.T) {
	bs := []*backend{newBackend(t, true), newBackend(t, true), newBackend(t, true), newBackend(t, true)}
	targets := []health.Target{
		{ID: "b3", URL: bs[3].srv.URL}, {ID: "b0", URL: bs[0].srv.URL},
		{ID: "b2", URL: bs[2].srv.URL}, {ID: "b1", URL: bs[1].srv.URL},
	}
	var obs observer
	p, err := health.NewProber(health.ProbeConfig{FailureThreshold: 1, SuccessThreshold: 1}, targets,
		health.WithObserver(obs.observe))
	require.NoError(t, err)

	bs[0].healthy.Store(false)
	bs[1].healthy.Store(false)
	bs[3].healthy.Store(false)
	p.ProbeOnce(context.Background())
	bs[3].healthy.Store(true)
	p.ProbeOnce(context.Background())
	// Within a round, transitions follow target order.
	assert.Equal(t, []health.Transition{down("b3"), down("b0"), down("b1"), up("b3")}, obs.transitions())
	for id, want := range map[string]health.State{"b0": health.Down, "b1": health.Down, "b2": health.Healthy, "b3": health.Healthy} {
		assert.Equal(t, want, p.State(id), id)
	}
}

func TestProberObserversAndReentrancy(t *testing.T) {
	b := newBackend(t, false)
	var p *health.Prober
	var log []string
	var err error
	p, err = health.NewProber(health.ProbeConfig{FailureThreshold: 1},
		[]health.Target{{ID: "b", URL: b.srv.URL}},
		health.WithObserver(func(tr health.Transition) {
			log = append(log, "first "+tr.String()+" state="+p.State(tr.ID).String())
		}),
		health.WithObserver(nil),
		health.WithObserver(func(tr health.Transition) { log = append(log, "second "+tr.String()) }),
	)
	require.NoError(t, err)
	p.ProbeOnce(context.Background())
	assert.Equal(t, []string{"first b: healthy -> down state=down", "second b: healthy -> down"}, log)
}

// A nil ProberOption is ignored, as affinity.New ignores a nil Option (before: a nil
// dereference in NewProber), and no targets make a Prober whose rounds do nothing.
func TestNewProberNilOptionsAndNoTargets(t *testing.T) {
	tests := []struct {
		name    string
		targets []health.Target
		opts    []health.ProberOption
	}{
		{"nil option", []health.Target{{ID: "b", URL: "http://127.0.0.1:1"}}, []health.ProberOption{nil}},
		{"nil among options", []health.Target{{ID: "b", URL: "http://127.0.0.1:1"}},
			[]health.ProberOption{health.WithTicks(nil), nil, health.WithHTTPClient(nil)}},
		{"no targets", nil, nil},
		{"no targets, nil option", []health.Target{}, []health.ProberOption{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p *health.Prober
			var err error
			require.NotPanics(t, func() { p, err = health.NewProber(health.ProbeConfig{}, tt.targets, tt.opts...) })
			require.NoError(t, err)
			require.NotNil(t, p)
			assert.Equal(t, health.Healthy, p.State("b"))
			if len(tt.targets) == 0 {
				p.ProbeOnce(context.Background()) // nothing to probe
			}
		})
	}
}

func TestProberWithHTTPClient(t *testing.T) {
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Probe") == "yes" {
			seen.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("X-Probe", "yes")
		return http.DefaultTransport.RoundTrip(r)
	})}
	p, err := health.NewProber(health.ProbeConfig{}, []health.Target{{ID: "b", URL: srv.URL}},
		health.WithHTTPClient(nil), health.WithHTTPClient(client))
	require.NoError(t, err)
	p.ProbeOnce(context.Background())
	assert.Equal(t, int64(1), seen.Load())
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
