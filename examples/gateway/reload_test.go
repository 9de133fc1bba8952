package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

// jsonBackends starts n test backends answering every request with a small JSON object.
func jsonBackends(t *testing.T, n int) []string {
	t.Helper()
	urls := make([]string, n)
	for i := range urls {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"cmpl","choices":[]}`))
		}))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	return urls
}

// yamlConfig renders a config with the given backends (id -> url, weight) and extra YAML.
func yamlConfig(t *testing.T, urls []string, ids []string, weights []float64, extra string) gateway.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:0\nbackends:\n")
	for i, id := range ids {
		fmt.Fprintf(&b, "  - {id: %s, url: %q, weight: %v}\n", id, urls[i], weights[i])
	}
	b.WriteString(extra)
	cfg, err := gateway.ParseConfig([]byte(b.String()))
	require.NoError(t, err, b.String())
	return cfg
}

func send(t testing.TB, h http.Handler, session string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Session-ID", session)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// A load run across 10 reloads (scale-out, weight changes, a TTL change that rebuilds the
// Scheduler, health settings, scale-in of the added backend): no request fails, and no
// session moves unless its backend was removed.
func TestReloadUnderLoad(t *testing.T) {
	urls := jsonBackends(t, 4)
	ids := []string{"b0", "b1", "b2", "b3"}
	cfgs := []gateway.Config{
		yamlConfig(t, urls[:4], ids[:4], []float64{1, 1, 1, 1}, ""),                                      // scale out
		yamlConfig(t, urls[:4], ids[:4], []float64{1, 2, 1, 3}, ""),                                      // weights
		yamlConfig(t, urls[:4], ids[:4], []float64{1, 2, 1, 3}, "affinity: {sticky_ttl_seconds: 900}\n"), // new Scheduler
		yamlConfig(t, urls[:4], ids[:4], []float64{1, 2, 1, 3}, "sweep_seconds: 30\n"),                   // loops restart
		yamlConfig(t, urls[:4], ids[:4], []float64{1, 1, 1, 1}, ""),                                      // weights back
		yamlConfig(t, urls[:3], ids[:3], []float64{1, 1, 1}, ""),                                         // scale in: b3 drains
		yamlConfig(t, urls[:3], ids[:3], []float64{1, 1, 1}, "max_body_bytes: 1048576\n"),                // a plain setting
		yamlConfig(t, urls[:4], ids[:4], []float64{1, 1, 1, 1}, "affinity: {sticky_ttl_seconds: 600}\n"), // b3 back + TTL
		yamlConfig(t, urls[:4], ids[:4], []float64{1, 1, 1, 1}, "retry_on_connect_error: false\n"),       // retry off
		yamlConfig(t, urls[:3], ids[:3], []float64{2, 1, 1}, "affinity: {sticky_ttl_seconds: 600}\n"),    // scale in again
	}
	g, err := gateway.New(yamlConfig(t, urls[:3], ids[:3], []float64{1, 1, 1}, ""))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	client := srv.Client()

	var requests, failures, needless atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			where := map[string]string{}
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				sessions := []string{fmt.Sprintf("w%d-s%d", w, round%8), fmt.Sprintf("w%d-new%d", w, round)}
				for _, s := range sessions {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
					req.Header.Set("X-Session-ID", s)
					resp, err := client.Do(req)
					requests.Add(1)
					if err != nil || resp.StatusCode != http.StatusOK {
						failures.Add(1)
						if resp != nil {
							resp.Body.Close()
						}
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					got := resp.Header.Get(gateway.HeaderBackend)
					// b3 is the only backend ever removed: a move away from it is needed.
					if prev, ok := where[s]; ok && prev != got && prev != "b3" {
						needless.Add(1)
						t.Errorf("session %s moved %s -> %s", s, prev, got)
					}
					where[s] = got
				}
			}
		})
	}
	for i, cfg := range cfgs {
		target := int64(60 * (i + 1))
		for requests.Load() < target { // let traffic flow between reloads
			runtime.Gosched()
		}
		require.NoError(t, g.Reload(cfg), "reload %d", i)
	}
	for target := requests.Load() + 60; requests.Load() < target; {
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, failures.Load(), "client errors across reloads")
	assert.Zero(t, needless.Load(), "needless moves")
	assert.Greater(t, requests.Load(), int64(600))
	st := g.Scheduler().Stats()
	assert.Positive(t, st.Hits, "sessions kept hitting after the Scheduler was rebuilt")
	assert.Equal(t, 600*time.Second, g.Scheduler().Table().TTL(""))
}

func TestReloadRejectsBadConfigAndKeepsServing(t *testing.T) {
	urls := jsonBackends(t, 2)
	good := yamlConfig(t, urls, []string{"b0", "b1"}, []float64{1, 1}, "")
	var logs bytes.Buffer
	g, err := gateway.New(good, gateway.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	require.Equal(t, http.StatusOK, send(t, g, "s1").Code)
	before, _ := g.Scheduler().Lookup("s1", "")

	dup := good
	dup.Backends = append(append([]gateway.BackendConfig(nil), good.Backends...), good.Backends[0])
	moved := good
	moved.Listen = "127.0.0.1:1"
	badTTL := good
	badTTL.Affinity.StickyTTLSeconds = affinity.TTLSeconds(-5)
	noHeaders := good
	noHeaders.SessionHeaders = []string{}
	tierIsSession := good
	tierIsSession.TierHeader = "x-session-id"
	hostHeader := good
	hostHeader.SessionHeaders = []string{"Host"}
	badSnapshot := good
	badSnapshot.BindingSnapshot = filepath.Join(t.TempDir(), "nonexistent", "x.snap")
	blankModel := good
	blankModel.ModelTiers = map[string]string{"big": "large", " \t": "large"}
	tests := []struct {
		name string
		cfg  gateway.Config
		want error
	}{
		{"duplicate backend", dup, gateway.ErrDuplicateBackend},
		{"empty session_headers", noHeaders, gateway.ErrNoSessionHeaders},
		{"tier_header is a session header", tierIsSession, gateway.ErrHeaderConflict},
		{"Host as session header", hostHeader, gateway.ErrHeaderName},
		{"binding_snapshot directory missing", badSnapshot, gateway.ErrBindingSnapshot},
		{"blank model_tiers model name", blankModel, gateway.ErrTierName},
		{"no backends", gateway.Config{Listen: good.Listen}, gateway.ErrNoBackends},
		{"negative TTL", badTTL, gateway.ErrAffinityConfig},
		{"listen change", moved, gateway.ErrReloadNeedsRestart},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, g.Reload(tt.cfg), tt.want)
			assert.Equal(t, good, g.Config(), "the old config keeps serving")
			rec := send(t, g, "s1")
			require.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, before, rec.Header().Get(gateway.HeaderBackend))
		})
	}

	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gateway.yaml")
		require.NoError(t, os.WriteFile(path, []byte("backends: []\n"), 0o600))
		require.ErrorIs(t, g.ReloadFile(path, nil), gateway.ErrNoBackends)
		assert.Contains(t, logs.String(), "config reload rejected")
		assert.Contains(t, logs.String(), "backends: at least one backend is required")
		assert.Equal(t, good, g.Config())

		blank := fmt.Sprintf("backends: [{id: b0, url: %q}, {id: b1, url: %q}]\nmodel_tiers:\n  big: large\n  '  ': large\n", urls[0], urls[1])
		require.NoError(t, os.WriteFile(path, []byte(blank), 0o600))
		require.ErrorIs(t, g.ReloadFile(path, nil), gateway.ErrTierName)
		assert.Contains(t, logs.String(), `model_tiers[\"  \"]: blank model name`)
		assert.Equal(t, good, g.Config())
		rec := send(t, g, "s1")
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, before, rec.Header().Get(gateway.HeaderBackend))

		require.NoError(t, os.WriteFile(path, []byte("backends: [{id: x, url: 'http://x.test'}]\n---\nbogus_key: 1\n"), 0o600))
		require.ErrorIs(t, g.ReloadFile(path, nil), gateway.ErrConfigSyntax, "a second document is refused")
		assert.Contains(t, logs.String(), "second YAML document")
		assert.Equal(t, good, g.Config())
	})
}

// A removed backend is drained: new sessions avoid it, and a session bound to it is
// rebound when it returns, counted once as broken{not_candidate}.
func TestReloadDrainsRemovedBackend(t *testing.T) {
	urls := jsonBackends(t, 3)
	ids := []string{"b0", "b1", "b2"}
	g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1, 1}, ""))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	onB2 := map[string]bool{}
	for i := range 60 {
		s := fmt.Sprintf("s%d", i)
		if send(t, g, s).Header().Get(gateway.HeaderBackend) == "b2" {
			onB2[s] = true
		}
	}
	require.NotEmpty(t, onB2)
	require.NoError(t, g.Reload(yamlConfig(t, urls[:2], ids[:2], []float64{1, 1}, "")))
	for i := range 60 {
		s := fmt.Sprintf("s%d", i)
		rec := send(t, g, s)
		require.Equal(t, http.StatusOK, rec.Code)
		got := rec.Header().Get(gateway.HeaderBackend)
		require.NotEqual(t, "b2", got)
		assert.Equal(t, !onB2[s], rec.Header().Get(gateway.HeaderAffinityHit) == "true", s)
	}
	for i := range 20 {
		assert.NotEqual(t, "b2", send(t, g, fmt.Sprintf("new%d", i)).Header().Get(gateway.HeaderBackend))
	}
	assert.Equal(t, uint64(len(onB2)), g.Scheduler().Stats().Broken.NotCandidate)
}

// A TTL change builds a new Scheduler; the bindings keep their backend and their remaining
// TTL, cut to the new TTL.
func TestReloadAffinityChangeCopiesBindings(t *testing.T) {
	urls := jsonBackends(t, 3)
	ids := []string{"b0", "b1", "b2"}
	clk := affinitytest.NewClock(time.Unix(1_700_000_000, 0))
	g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1, 1}, "affinity: {sticky_ttl_seconds: 600}\n"),
		gateway.WithSchedulerOptions(affinity.WithClock(clk)))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	want := map[string]string{}
	for i := range 30 {
		s := fmt.Sprintf("s%d", i)
		want[s] = send(t, g, s).Header().Get(gateway.HeaderBackend)
	}
	old := g.Scheduler()
	require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1, 1}, "affinity: {sticky_ttl_seconds: 60}\n")))
	require.NotSame(t, old, g.Scheduler())
	require.Equal(t, 30, g.Scheduler().Len())
	for s, id := range want {
		got, ok := g.Scheduler().Lookup(s, "")
		require.True(t, ok, s)
		assert.Equal(t, id, got, s)
	}
	rec := send(t, g, "s3")
	assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit))
	clk.Advance(61 * time.Second)
	_, ok := g.Scheduler().Lookup("s4", "")
	assert.False(t, ok, "the copied binding has the new, shorter TTL")
}

func TestWatchConfigReloadsOnChange(t *testing.T) {
	urls := jsonBackends(t, 2)
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	write := func(extra string) {
		data := fmt.Sprintf("listen: 127.0.0.1:0\nbackends:\n  - {id: b0, url: %q}\n%s", urls[0], extra)
		require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
	}
	write("")
	g, ticks := watchGateway(t, path)
	ticks <- time.Time{} // unchanged: nothing happens
	assert.Len(t, g.Config().Backends, 1)
	write(fmt.Sprintf("  - {id: b1, url: %q}\n", urls[1]))
	ticks <- time.Time{}
	ticks <- time.Time{} // the previous tick's reload has finished
	assert.Len(t, g.Config().Backends, 2)
	write("  - {id: b0, url: \"ftp://x\"}\n") // bad: rejected
	ticks <- time.Time{}
	ticks <- time.Time{}
	assert.Len(t, g.Config().Backends, 2, "a bad file keeps the old config")
}

// A backend the active prober held Down is marked up again when a reload replaces the
// prober — here by turning health checks off — since nothing else would bring it back.
func TestReloadReleasesBackendsHeldDownByTheOldProber(t *testing.T) {
	var healthy atomic.Bool
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(flaky.Close)
	urls := append(jsonBackends(t, 1), flaky.URL)
	ids := []string{"b0", "b1"}
	g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1},
		"health: {enabled: true, failure_threshold: 1, success_threshold: 1}\n"))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	g.ProbeOnce(context.Background())
	require.Equal(t, health.Down, g.Scheduler().Health().State("b1"))

	require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1}, "health: {enabled: false}\n")))
	assert.Equal(t, health.Healthy, g.Scheduler().Health().State("b1"))
}

// A backend removed while passively down and added again later is not stuck Down.
func TestReloadRemovedBackendComesBackClean(t *testing.T) {
	urls := jsonBackends(t, 2)
	ids := []string{"b0", "b1"}
	g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1}, ""))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	g.Scheduler().OnBackendDown("b1") // as the passive check would
	require.NoError(t, g.Reload(yamlConfig(t, urls[:1], ids[:1], []float64{1}, "")))
	require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1}, "")))
	assert.Equal(t, health.Healthy, g.Scheduler().Health().State("b1"))
}
