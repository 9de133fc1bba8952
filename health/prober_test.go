package health_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
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

func TestProbeConfigValidation(t *testing.T) {
	good := []health.Target{{ID: "b", URL: "http://10.0.0.5:8000"}}
	tests := []struct {
		name    string
		cfg     health.ProbeConfig
		targets []health.Target
		wantErr error
		wantMsg string // substring naming the field/target and the value
	}{
		{name: "zero config is valid", targets: good},
		{name: "no targets is valid"},
		{name: "explicit values", cfg: health.ProbeConfig{Path: "/h", IntervalSeconds: 0.5, TimeoutSeconds: 0.1, FailureThreshold: 1, SuccessThreshold: 1}, targets: good},
		{name: "negative interval", cfg: health.ProbeConfig{IntervalSeconds: -1}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "interval_seconds -1"},
		{name: "NaN interval", cfg: health.ProbeConfig{IntervalSeconds: math.NaN()}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "interval_seconds NaN"},
		{name: "infinite timeout", cfg: health.ProbeConfig{TimeoutSeconds: math.Inf(1)}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "timeout_seconds +Inf"},
		{name: "overflowing timeout", cfg: health.ProbeConfig{TimeoutSeconds: 1e10}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "timeout_seconds 1e+10"},
		{name: "sub-nanosecond interval", cfg: health.ProbeConfig{IntervalSeconds: 1e-12}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "interval_seconds 1e-12"},
		{name: "negative failure threshold", cfg: health.ProbeConfig{FailureThreshold: -1}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "failure_threshold -1"},
		{name: "negative success threshold", cfg: health.ProbeConfig{SuccessThreshold: -2}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "success_threshold -2"},
		{name: "relative path", cfg: health.ProbeConfig{Path: "health"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `path "health"`},
		{name: "path with a space", cfg: health.ProbeConfig{Path: "/h h"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `path "/h h" has byte ' ' at offset 2`},
		{name: "path with a control byte", cfg: health.ProbeConfig{Path: "/h\x01"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 2`},
		{name: "path with NUL", cfg: health.ProbeConfig{Path: "/\x00"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 1`},
		{name: "path with DEL", cfg: health.ProbeConfig{Path: "/\x7f"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 1`},
		{name: "path with non-ASCII", cfg: health.ProbeConfig{Path: "/gesundheit-\u00fc"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 12`},
		{name: "path with a fragment", cfg: health.ProbeConfig{Path: "/h#x"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 2`},
		{name: "path with a bad escape", cfg: health.ProbeConfig{Path: "/h%zz"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `not a valid URL path`},
		{name: "escaped space and a query", cfg: health.ProbeConfig{Path: "/my%20health?full=1"}, targets: good},
		{name: "empty target ID", targets: []health.Target{{ID: "", URL: "http://h:1"}}, wantErr: health.ErrInvalidTarget, wantMsg: `targets[0] has an empty ID`},
		{name: "duplicate target ID", targets: []health.Target{{ID: "a", URL: "http://h:1"}, {ID: "b", URL: "http://h:2"}, {ID: "a", URL: "http://h:3"}}, wantErr: health.ErrDuplicateTarget, wantMsg: `"a" at targets[0] and targets[2]`},
		{name: "empty URL", targets: []health.Target{{ID: "a", URL: ""}}, wantErr: health.ErrInvalidTarget, wantMsg: `target "a" url ""`},
		{name: "no scheme", targets: []health.Target{{ID: "a", URL: "10.0.0.5:8000"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "10.0.0.5:8000"`},
		{name: "ftp scheme", targets: []health.Target{{ID: "a", URL: "ftp://h/x"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "ftp://h/x"`},
		{name: "no host", targets: []health.Target{{ID: "a", URL: "http:///x"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "http:///x"`},
		{name: "query", targets: []health.Target{{ID: "a", URL: "http://h/?x=1"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "http://h/?x=1"`},
		{name: "unparsable", targets: []health.Target{{ID: "a", URL: "http://h:port"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "http://h:port"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := health.NewProber(tt.cfg, tt.targets)
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.NotNil(t, p)
				require.NoError(t, tt.cfg.Validate())
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tt.wantMsg)
			if tt.wantErr == health.ErrInvalidProbeConfig {
				assert.ErrorIs(t, tt.cfg.Validate(), health.ErrInvalidProbeConfig)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "health: "), err.Error())
		})
	}
}

func TestCheck(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte("ok"))
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "/fail":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/stall":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name   string
		url    string
		client *http.Client
		want   bool
	}{
		{"200", srv.URL + "/ok", srv.Client(), true},
		{"204 with the default client", srv.URL + "/nocontent", nil, true},
		{"503", srv.URL + "/fail", srv.Client(), false},
		{"404", srv.URL + "/missing", srv.Client(), false},
		{"body stalls past the deadline", srv.URL + "/stall", srv.Client(), false},
		{"connection refused", closedURL + "/ok", nil, false},
		{"malformed URL", "http://[::1", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := 10 * time.Second // generous: only the stalled body should reach it
			if strings.HasSuffix(tt.url, "/stall") {
				timeout = 50 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			assert.Equal(t, tt.want, health.Check(ctx, tt.client, tt.url))
		})
	}
}
