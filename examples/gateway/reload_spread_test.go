package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// podServer is one server for many backends: backend "pod-i" has URL <srv>/pod-i, and
// each of its probes (<srv>/pod-i/health) is counted by backend.
type podServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	probes map[string]int
}

func newPodServer(t *testing.T) *podServer {
	t.Helper()
	p := &podServer{probes: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/health"); ok {
			p.mu.Lock()
			p.probes[id]++
			p.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// take returns the probes counted since the last call, by backend.
func (p *podServer) take() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.probes
	p.probes = map[string]int{}
	return h
}

// A reload that adds a large batch of backends spreads their first probes: at most 16
// start in one slot of the interval (interval/128; docs/gateway-health.md, "Probe
// schedule and connections"), and every one is probed within one interval; a reload
// that adds one backend (or a few) still probes it at once, so a dead one goes Down
// quickly (before: every added backend was probed at the same instant, which made the
// requests in the second after a reload adding hundreds of backends slow — tester38:
// p99 648 ms, 25.5 ms without reloads).
func TestReloadSpreadsFirstProbesOfALargeBatch(t *testing.T) {
	tests := []struct {
		name    string
		added   int
		perStep int // at most this many first probes in one slot
	}{
		{"one backend", 1, 1},
		{"sixteen backends", 16, 16},
		{"1000 backends", 1000, 16},
		{"3000 backends", 3000, 24}, // ceil(3000/128): the whole batch within one interval
	}
	const interval = 5 * time.Second
	const slot = interval / 128
	const hc = "health: {enabled: true, interval_seconds: 5}\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := newPodServer(t)
			ids := []string{"pod-0"}
			urls := []string{pods.srv.URL + "/pod-0"}
			g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1}, hc))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			ctx := context.Background()
			now := time.Unix(1_800_000_000, 0)
			g.ProbeDue(ctx, now)
			require.Equal(t, map[string]int{"pod-0": 1}, pods.take())

			now = now.Add(time.Second)
			for i := 1; i <= tt.added; i++ {
				ids = append(ids, fmt.Sprintf("pod-%d", i))
				urls = append(urls, fmt.Sprintf("%s/pod-%d", pods.srv.URL, i))
			}
			weights := make([]float64, len(ids))
			for i := range weights {
				weights[i] = 1
			}
			require.NoError(t, g.Reload(yamlConfig(t, urls, ids, weights, hc)))
			start := now
			first := map[string]time.Duration{} // when each added backend was first probed
			for ; now.Sub(start) < 2*interval; now = now.Add(slot) {
				g.ProbeDue(ctx, now)
				n := 0
				for id := range pods.take() {
					if _, seen := first[id]; !seen && id != "pod-0" {
						first[id] = now.Sub(start)
						n++
					}
				}
				assert.LessOrEqual(t, n, tt.perStep, "first probes at %v", now.Sub(start))
			}
			require.Len(t, first, tt.added, "every added backend is probed")
			last := time.Duration(0)
			for _, d := range first {
				last = max(last, d)
			}
			assert.Less(t, last, interval, "all within one interval")
			if tt.added <= 16 {
				assert.Zero(t, last, "a small batch is probed at once")
			}
		})
	}
}
