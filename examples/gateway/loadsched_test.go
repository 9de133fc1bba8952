package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// vllmMetrics is a backend whose /metrics answers by mode: "ok" (7 waiting, 3 running),
// "fail" (500) or "hang" (no answer until the request is cancelled or release closes).
type vllmMetrics struct {
	url     string
	hits    atomic.Int64
	mode    atomic.Value
	release chan struct{}
}

func newVLLMMetrics(t *testing.T, mode string) *vllmMetrics {
	m := &vllmMetrics{release: make(chan struct{})}
	m.mode.Store(mode)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		m.hits.Add(1)
		switch m.mode.Load().(string) {
		case "hang":
			select {
			case <-r.Context().Done():
			case <-m.release:
			}
			return
		case "fail":
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 7\n" +
			"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(m.release) }) // runs first: frees hung handlers before Close waits
	m.url = srv.URL
	return m
}

// loadGateway runs a gateway with load reports every 5 s (health checks off, 60-s
// scrape timeout) on a fake clock, its scrape passes driven by the returned ticks.
// before runs ahead of Run; opts are passed to New after the test's own.
func loadGateway(t *testing.T, backends map[string]*vllmMetrics, order []string, before func(*gateway.Gateway), opts ...gateway.Option) (*gateway.Gateway, *affinitytest.Clock, chan time.Time, *syncBuffer, func(...string) gateway.Config) {
	t.Helper()
	conf := func(ids ...string) gateway.Config {
		var y strings.Builder
		y.WriteString("load_report_seconds: 5\nhealth: {enabled: false, timeout_seconds: 60}\nbackends:\n")
		for _, id := range ids {
			fmt.Fprintf(&y, "  - {id: %s, url: %q}\n", id, backends[id].url)
		}
		cfg, err := gateway.ParseConfig([]byte(y.String()))
		require.NoError(t, err)
		return cfg
	}
	clk := affinitytest.NewClock(time.Unix(1_700_000_000, 0))
	ticks := make(chan time.Time)
	logger, logs := captureLogs()
	g, err := gateway.New(conf(order...), append([]gateway.Option{gateway.WithClock(clk), gateway.WithLoadReportTicks(ticks), gateway.WithLogger(logger)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	if before != nil {
		before(g)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return g, clk, ticks, logs, conf
}

func reported(g *gateway.Gateway, id string) func() bool {
	return func() bool { return g.Scheduler().Load(id).Reported == 10 }
}

// Backends that never answer do not hold back the others' reports (tester37 3a: the
// scrape was sequential, so each hung backend cost a whole timeout).
func TestLoadScrapeHungBackendsDoNotDelayOthers(t *testing.T) {
	bs := map[string]*vllmMetrics{"h1": newVLLMMetrics(t, "hang"), "h2": newVLLMMetrics(t, "hang"),
		"h3": newVLLMMetrics(t, "hang"), "ok": newVLLMMetrics(t, "ok")}
	g, clk, ticks, _, _ := loadGateway(t, bs, []string{"h1", "h2", "h3", "ok"}, nil)
	ticks <- clk.Now()
	require.Eventually(t, reported(g, "ok"), 5*time.Second, time.Millisecond, "the answering backend's report")
	for _, id := range []string{"h1", "h2", "h3"} {
		assert.Zero(t, g.Scheduler().Load(id).Reported, id)
	}
}

// ReportLoads scrapes with bounded concurrency too: a hung backend listed first does not
// hold back the next one.
func TestReportLoadsConcurrent(t *testing.T) {
	hung, ok := newVLLMMetrics(t, "hang"), newVLLMMetrics(t, "ok")
	cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf("health: {timeout_seconds: 60}\nbackends:\n  - {id: h, url: %q}\n  - {id: ok, url: %q}\n", hung.url, ok.url)))
	require.NoError(t, err)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.ReportLoads(ctx); close(done) }()
	require.Eventually(t, reported(g, "ok"), 5*time.Second, time.Millisecond)
	cancel()
	<-done
}

// A reload neither delays nor repeats the scrapes of the backends that stay, nor clears
// their reports, even with a scrape in flight; a backend it adds is scraped at once, one
// it removes is dropped (tester37 3b, 3c).
func TestLoadScrapeReloadKeepsSchedules(t *testing.T) {
	bs := map[string]*vllmMetrics{"h": newVLLMMetrics(t, "hang"), "a": newVLLMMetrics(t, "ok"),
		"b": newVLLMMetrics(t, "ok"), "r": newVLLMMetrics(t, "ok"), "c": newVLLMMetrics(t, "ok")}
	g, clk, ticks, _, conf := loadGateway(t, bs, []string{"a", "r", "h", "b"}, nil)
	ticks <- clk.Now()
	for _, id := range []string{"a", "r", "b"} { // b after the hung h
		assert.Eventually(t, reported(g, id), 5*time.Second, time.Millisecond, id)
	}
	require.Eventually(t, func() bool { return bs["h"].hits.Load() == 1 }, 5*time.Second, time.Millisecond)

	clk.Advance(2 * time.Second) // not due yet
	require.NoError(t, g.Reload(conf("h", "a", "b", "c")))
	assert.Eventually(t, reported(g, "c"), 5*time.Second, time.Millisecond, "an added backend is scraped at once, with no tick")
	ticks <- clk.Now()
	ticks <- clk.Now() // the pass of the first tick has ended
	for _, id := range []string{"a", "b"} {
		assert.Equal(t, int64(1), bs[id].hits.Load(), "%s stays on its schedule", id)
		assert.Equal(t, int64(10), g.Scheduler().Load(id).Reported, "%s keeps its report", id)
	}
	assert.Equal(t, int64(1), bs["h"].hits.Load(), "h's scrape was not cancelled and restarted")

	clk.Advance(3 * time.Second) // a and b are due
	ticks <- clk.Now()
	require.Eventually(t, func() bool { return bs["a"].hits.Load() == 2 && bs["b"].hits.Load() == 2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int64(1), bs["r"].hits.Load(), "r was removed: not scraped")
	assert.Equal(t, int64(1), bs["h"].hits.Load(), "h is still being scraped: not scraped twice")
}

// A report older than 3 intervals is logged once at Warn, with the gauge, and once at
// Info when it is fresh again; Down backends are neither scraped nor reported stale.
func TestLoadScrapeStaleOnce(t *testing.T) {
	bs := map[string]*vllmMetrics{"f": newVLLMMetrics(t, "fail"), "d": newVLLMMetrics(t, "ok")}
	g, clk, ticks, logs, _ := loadGateway(t, bs, []string{"f", "d"}, func(g *gateway.Gateway) {
		g.Scheduler().OnBackendDown("d")
		require.NoError(t, g.Scheduler().ReportLoad("d", affinity.BackendLoad{Waiting: 4}))
	})
	stale := func() float64 { return staleGauge(t, g) }
	for i := range 8 {
		ticks <- clk.Now()
		require.Eventually(t, func() bool { // recorded (Debug), so the next pass finds it due
			return strings.Count(logs.String(), "backend load report failed") == i+1
		}, 5*time.Second, time.Millisecond)
		clk.Advance(5 * time.Second)
	}
	ticks <- clk.Now()
	ticks <- clk.Now() // the pass of the first tick has ended
	assert.Equal(t, 1, strings.Count(logs.String(), "backend load reports stale"), logs.String())
	assert.Contains(t, logs.String(), `"backends":["f"]`)
	assert.Equal(t, 1.0, stale())
	assert.Zero(t, bs["d"].hits.Load(), "a Down backend is not scraped")
	assert.Zero(t, g.Scheduler().Load("d").Reported, "a Down backend's report is cleared")

	require.Eventually(t, func() bool { // the scrape of the last pass is recorded
		return strings.Count(logs.String(), "backend load report failed") == 9
	}, 5*time.Second, time.Millisecond)
	bs["f"].mode.Store("ok")
	clk.Advance(5 * time.Second)
	ticks <- clk.Now()
	require.Eventually(t, reported(g, "f"), 5*time.Second, time.Millisecond)
	for range 3 {
		clk.Advance(5 * time.Second)
		ticks <- clk.Now()
	}
	ticks <- clk.Now()
	assert.Equal(t, 1, strings.Count(logs.String(), "backend load reports fresh again"), logs.String())
	assert.Equal(t, 1, strings.Count(logs.String(), "backend load reports stale"))
	assert.Zero(t, stale())
}
