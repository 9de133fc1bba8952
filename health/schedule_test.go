package health_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/health"
)

// pods is one server for many targets: target "pod-i" has URL <srv>/pod-i, and every
// probe is recorded by its target; /pod-i/health answers 200 unless i is in dead.
type pods struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits map[string]int
	dead map[string]bool
}

func newPods(t *testing.T) *pods {
	t.Helper()
	p := &pods{hits: map[string]int{}, dead: map[string]bool{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/health")
		p.mu.Lock()
		p.hits[id]++
		dead := p.dead[id]
		p.mu.Unlock()
		if dead {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *pods) targets(ids ...string) []health.Target {
	ts := make([]health.Target, len(ids))
	for i, id := range ids {
		ts[i] = health.Target{ID: id, URL: p.srv.URL + "/" + id}
	}
	return ts
}

// take returns the probes recorded since the last call, by target.
func (p *pods) take() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hits
	p.hits = map[string]int{}
	return h
}

func (p *pods) setDead(id string, dead bool) {
	p.mu.Lock()
	p.dead[id] = dead
	p.mu.Unlock()
}

// t0 is the fake clock's start; Run's schedule only compares times.
var t0 = time.Unix(1_800_000_000, 0)

const interval = 5 * time.Second

// The schedule probes every target once first (at most 16 at one instant, see
// TestProbeDueSpreadsFirstProbes), then once per interval each, at offsets spread across
// the interval (before: every round probed all targets at the same instant, which at
// 3,000 backends opened 3,000 connections at once every interval).
func TestProbeDueSpreadsTargetsAcrossTheInterval(t *testing.T) {
	const n = 60
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("pod-%d", i)
	}
	b := newPods(t)
	p, err := health.NewProber(health.ProbeConfig{IntervalSeconds: interval.Seconds()}, b.targets(ids...))
	require.NoError(t, err)
	ctx := context.Background()

	const step = interval / 256
	firstAt := map[string]time.Duration{}  // offset of each target's first probe after t0
	secondAt := map[string]time.Duration{} // and of its second
	perStep := map[time.Duration]int{}     // probes after the first, by step
	for d := time.Duration(0); d <= 4*interval; d += step {
		p.ProbeDue(ctx, t0.Add(d))
		for id, hits := range b.take() {
			require.Equal(t, 1, hits, "%s probed once at %v", id, d)
			f, seen := firstAt[id]
			if !seen {
				firstAt[id] = d
				continue
			}
			perStep[d]++
			s, seen := secondAt[id]
			if !seen {
				secondAt[id] = d
				assert.GreaterOrEqual(t, d-f, interval/2, "%s: second probe at least half an interval after the first", id)
				assert.Less(t, d-f, interval*3/2+step, "%s: second probe within 1.5 intervals", id)
				continue
			}
			// later probes: exactly one interval apart, at the target's own offset
			assert.Zero(t, (d-s)%interval, "%s: probed at %v, offset %v", id, d, s)
		}
	}
	require.Len(t, firstAt, n)
	require.Len(t, secondAt, n)
	most := 0
	offsets := map[time.Duration]bool{}
	for d, c := range perStep {
		most = max(most, c)
		offsets[d%interval] = true
	}
	assert.GreaterOrEqual(t, len(offsets), n/2, "the %d targets are probed at many instants of the interval", n)
	assert.LessOrEqual(t, most, 4, "at most a few targets share an instant (before: all %d)", n)
}

// A batch of new targets (a new Prober's, or those a replacing Prober does not carry
// over) has its first probes spread: at most 16 per slot of the interval (interval/128),
// or ceil(batch/128) for a batch too large to be probed within one interval at that rate,
// and every target within one interval; a batch of up to 16 is probed at once, so a
// lone dead backend goes Down as fast as before (before: every new target was probed at
// the same instant, which made requests slow after reloads adding hundreds of backends,
// tester38: p99 648 ms in the second after them, 25.5 ms without reloads).
func TestProbeDueSpreadsFirstProbes(t *testing.T) {
	tests := []struct {
		name    string
		carried int // targets an older Prober probed, carried over by WithStateFrom
		added   int // new targets
		perSlot int // most first probes in one slot
	}{
		{"lone new target", 0, 1, 1},
		{"lone target added to 200", 200, 1, 1},
		{"16 new targets", 0, 16, 16},
		{"1000 new targets", 0, 1000, 16},
		{"1000 added to 200", 200, 1000, 16},
		{"4000 new targets", 0, 4000, 32},
	}
	const slot = interval / 128
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newPods(t)
			ids := make([]string, 0, tt.carried+tt.added)
			for i := range tt.carried + tt.added {
				ids = append(ids, fmt.Sprintf("pod-%d", i))
			}
			ctx := context.Background()
			var from []health.ProberOption
			if tt.carried > 0 {
				old, err := health.NewProber(health.ProbeConfig{IntervalSeconds: interval.Seconds()}, b.targets(ids[:tt.carried]...))
				require.NoError(t, err)
				for d := time.Duration(0); d < interval; d += slot {
					old.ProbeDue(ctx, t0.Add(d))
				}
				b.take()
				from = append(from, health.WithStateFrom(old))
			}
			start := t0.Add(interval + interval/3) // not on a slot boundary
			p, err := health.NewProber(health.ProbeConfig{IntervalSeconds: interval.Seconds()}, b.targets(ids...), from...)
			require.NoError(t, err)
			firstAt := map[string]time.Duration{}
			for d := time.Duration(0); d < 2*interval; d += slot {
				p.ProbeDue(ctx, start.Add(d))
				n := 0
				for id := range b.take() {
					if _, seen := firstAt[id]; !seen && !slices.Contains(ids[:tt.carried], id) {
						firstAt[id] = d
						n++
					}
				}
				assert.LessOrEqual(t, n, tt.perSlot, "first probes at %v", d)
			}
			require.Len(t, firstAt, tt.added, "every new target is probed")
			last := time.Duration(0)
			for _, d := range firstAt {
				last = max(last, d)
			}
			assert.Less(t, last, interval, "every new target within one interval")
			if tt.added <= 16 {
				assert.Zero(t, last, "a small batch is probed at once")
			}
		})
	}
}

// Replacing the Prober with WithStateFrom faster than FailureThreshold x interval (a
// configuration reload every 0.6 interval) still marks a dead target Down after
// FailureThreshold failed probes, and a recovering target held Down Healthy after
// SuccessThreshold passed probes (before: each new Prober started every target Healthy
// with its counts at 0, so a dead backend never went Down while the reloads continued).
// Carried targets are not probed at once by the new Prober; new ones are.
func TestWithStateFromKeepsCountsAcrossReplacements(t *testing.T) {
	tests := []struct {
		name     string
		deadFrom bool // the target is dead at the start, and recovers after it is Down
	}{
		{"dead backend goes Down", true},
		{"recovering backend comes back", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newPods(t)
			b.setDead("x", true)
			cfg := health.ProbeConfig{IntervalSeconds: interval.Seconds(), FailureThreshold: 3, SuccessThreshold: 2}
			var obs observer
			ids := []string{"x", "a"}
			p, err := health.NewProber(cfg, b.targets(ids...), health.WithObserver(obs.observe))
			require.NoError(t, err)
			ctx := context.Background()
			now := t0
			probesOfX := 0
			// run advances the fake clock by d in small steps, replacing the Prober
			// (adding a target "n<k>") every 0.6 interval, and counts the probes of x.
			k := 0
			lastReplace := now
			run := func(d time.Duration, until func() bool) {
				for end := now.Add(d); now.Before(end) && !until(); now = now.Add(interval / 64) {
					if now.Sub(lastReplace) >= interval*6/10 {
						k++
						ids = append(ids, fmt.Sprintf("n%d", k))
						np, err := health.NewProber(cfg, b.targets(ids...), health.WithObserver(obs.observe), health.WithStateFrom(p))
						require.NoError(t, err)
						p.ProbeDue(ctx, now) // retired: probes nothing
						require.Zero(t, b.take()["x"], "a retired Prober probes nothing")
						np.ProbeDue(ctx, now)
						hits := b.take()
						assert.Equal(t, 1, hits[ids[len(ids)-1]], "the new target is probed at once")
						assert.Zero(t, hits["a"], "a carried target is not probed at once")
						probesOfX += hits["x"]
						p, lastReplace = np, now
						continue
					}
					p.ProbeDue(ctx, now)
					probesOfX += b.take()["x"]
				}
			}
			down := func() bool { return p.State("x") == health.Down }
			run(10*interval, down)
			require.Equal(t, health.Down, p.State("x"), "Down despite a replacement every 0.6 interval")
			assert.Equal(t, 3, probesOfX, "after failure_threshold probes")
			assert.Equal(t, []health.Transition{{ID: "x", From: health.Healthy, To: health.Down}}, obs.transitions())
			if tt.deadFrom {
				return
			}
			b.setDead("x", false)
			probesOfX = 0
			run(10*interval, func() bool { return p.State("x") == health.Healthy })
			require.Equal(t, health.Healthy, p.State("x"), "back despite a replacement every 0.6 interval")
			assert.Equal(t, 2, probesOfX, "after success_threshold probes")
			assert.Len(t, obs.transitions(), 2)
		})
	}
}

// Only a target with the same ID and probe URL is carried over: another URL or another
// path is another server, which starts Healthy and is probed at once.
func TestWithStateFromSameTarget(t *testing.T) {
	tests := []struct {
		name    string
		url     string // suffix of the new target's URL
		path    string
		carried bool
	}{
		{"same url and path", "/x", "", true},
		{"trailing slash", "/x/", "", true},
		{"other url", "/y", "", false},
		{"other path", "/x", "/ready", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newPods(t)
			b.setDead("x", true)
			old, err := health.NewProber(health.ProbeConfig{FailureThreshold: 1}, b.targets("x"))
			require.NoError(t, err)
			old.ProbeDue(context.Background(), t0)
			require.Equal(t, health.Down, old.State("x"))
			b.take()
			p, err := health.NewProber(health.ProbeConfig{FailureThreshold: 1, Path: tt.path},
				[]health.Target{{ID: "x", URL: b.srv.URL + tt.url}}, health.WithStateFrom(old))
			require.NoError(t, err)
			p.ProbeDue(context.Background(), t0.Add(time.Second))
			if tt.carried {
				assert.Equal(t, health.Down, p.State("x"))
				assert.Empty(t, b.take(), "not due yet")
				return
			}
			assert.Equal(t, health.Healthy, p.State("x"), "starts afresh")
			assert.Equal(t, 1, len(b.take()), "probed at once")
		})
	}
}
