package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// outstandingLines returns the outstanding-load gauge lines of /metrics for backend b0
// (in exposition order: cost, then requests).
func outstandingLines(t *testing.T, g *gateway.Gateway) string {
	t.Helper()
	return backendLines(t, g, "b0")
}

// A request in flight across a reload that replaces the Scheduler (a changed
// sticky_ttl_seconds) still counts in the outstanding-load gauges — its lease is on the
// old Scheduler — until it ends; then they are back to 0. Before, they dropped to 0 at
// the reload. Two reloads in a row (the request's Scheduler retired, then the one after
// it) count it once.
func TestOutstandingLoadAcrossReload(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(backend.Close)
	var once sync.Once
	finish := func() { once.Do(func() { close(release) }) }
	t.Cleanup(finish) // before backend.Close, should the test fail first
	config := func(ttl string) gateway.Config {
		cfg, err := gateway.ParseConfig([]byte("health: {enabled: false}\naffinity: {sticky_ttl_seconds: " + ttl +
			"}\nbackends:\n  - {id: b0, url: \"" + backend.URL + "\"}\n"))
		require.NoError(t, err)
		return cfg
	}
	g, err := gateway.New(config("60"))
	require.NoError(t, err)
	t.Cleanup(g.Close)

	body := `{"model":"m","messages":[{"role":"user","content":"0123456789abcdef0123456789abcdef"}]}` // cost 21
	done := make(chan int, 1)
	go func() {
		rec := do(t, g, chat, body, map[string]string{"X-Session-ID": "s1"})
		done <- rec.Code
	}()
	<-arrived
	busy := gateway.MetricOutstandingCost + "{backend=\"b0\"} 21\n" + gateway.MetricOutstandingRequests + "{backend=\"b0\"} 1"
	idle := gateway.MetricOutstandingCost + "{backend=\"b0\"} 0\n" + gateway.MetricOutstandingRequests + "{backend=\"b0\"} 0"
	require.Equal(t, busy, outstandingLines(t, g))

	old := g.Scheduler()
	require.NoError(t, g.Reload(config("120")))
	require.NotSame(t, old, g.Scheduler(), "the reload replaced the Scheduler")
	assert.Equal(t, busy, outstandingLines(t, g), "the request in flight on the old Scheduler still counts")
	require.NoError(t, g.Reload(config("180")))
	assert.Equal(t, busy, outstandingLines(t, g), "counted once after a second reload")

	finish()
	require.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, idle, outstandingLines(t, g), "back to 0 once it ended")
}

// backendLines returns the outstanding-load gauge lines of /metrics for backend id (in
// exposition order: cost, then requests).
func backendLines(t *testing.T, g *gateway.Gateway, id string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var out []string
	for l := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(l, gateway.MetricOutstandingRequests+`{backend="`+id+`"}`) ||
			strings.HasPrefix(l, gateway.MetricOutstandingCost+`{backend="`+id+`"}`) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}

// A reload that removes a backend while a request is in flight on it keeps exporting
// that backend's outstanding-load series (requests 1) until the request ends; then the
// series are gone. Whether the reload keeps the Scheduler (only the backends change) or
// replaces it (a new sticky_ttl_seconds too). Before: the series vanished at the reload.
func TestOutstandingLoadOfRemovedBackend(t *testing.T) {
	for _, replace := range []bool{false, true} {
		t.Run(map[bool]string{false: "same Scheduler", true: "new Scheduler"}[replace], func(t *testing.T) {
			arrived, release := make(chan string, 2), make(chan struct{})
			urls := map[string]string{}
			for _, id := range []string{"b0", "b1"} {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					arrived <- id
					<-release
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(`{"ok":true}`))
				}))
				t.Cleanup(srv.Close)
				urls[id] = srv.URL
			}
			var once sync.Once
			finish := func() { once.Do(func() { close(release) }) }
			t.Cleanup(finish) // before the servers close, should the test fail first
			config := func(ttl string, ids ...string) gateway.Config {
				y := "health: {enabled: false}\naffinity: {sticky_ttl_seconds: " + ttl + "}\nbackends:\n"
				for _, id := range ids {
					y += "  - {id: " + id + ", url: \"" + urls[id] + "\"}\n"
				}
				cfg, err := gateway.ParseConfig([]byte(y))
				require.NoError(t, err)
				return cfg
			}
			g, err := gateway.New(config("60", "b0", "b1"))
			require.NoError(t, err)
			t.Cleanup(g.Close)

			body := `{"model":"m","messages":[{"role":"user","content":"0123456789abcdef0123456789abcdef"}]}` // cost 21
			done := make(chan int, 1)
			go func() { done <- do(t, g, chat, body, map[string]string{"X-Session-ID": "s1"}).Code }()
			busyID := <-arrived
			keep := map[string]string{"b0": "b1", "b1": "b0"}[busyID]
			busy := gateway.MetricOutstandingCost + "{backend=\"" + busyID + "\"} 21\n" +
				gateway.MetricOutstandingRequests + "{backend=\"" + busyID + "\"} 1"
			require.Equal(t, busy, backendLines(t, g, busyID))

			ttl := "60"
			if replace {
				ttl = "120"
			}
			old := g.Scheduler()
			require.NoError(t, g.Reload(config(ttl, keep)))
			require.Equal(t, replace, old != g.Scheduler())
			assert.Equal(t, busy, backendLines(t, g, busyID), "the removed backend's request in flight still counts")
			assert.NotEmpty(t, backendLines(t, g, keep))

			finish()
			require.Equal(t, http.StatusOK, <-done)
			assert.Empty(t, backendLines(t, g, busyID), "the removed backend's series are gone once it ended")
			assert.NotEmpty(t, backendLines(t, g, keep))
		})
	}
}
