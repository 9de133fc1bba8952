package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

// drainConfig renders a config over b0..b2 at urls with b1's backends[].drain set to
// drain (omitted when false) and extra YAML.
func drainConfig(t *testing.T, urls []string, drain bool, extra string) gateway.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:0\nbackends:\n")
	for i, id := range []string{"b0", "b1", "b2"} {
		fmt.Fprintf(&b, "  - {id: %s, url: %q", id, urls[i])
		if id == "b1" && drain {
			b.WriteString(", drain: true")
		}
		b.WriteString("}\n")
	}
	b.WriteString(extra)
	cfg, err := gateway.ParseConfig([]byte(b.String()))
	require.NoError(t, err, b.String())
	return cfg
}

// sessionOn returns a session ID (prefix-n) that HRW places on want among b0..b2.
func sessionOn(t *testing.T, prefix, want string) string {
	t.Helper()
	for i := range 1000 {
		if s := fmt.Sprintf("%s-%d", prefix, i); hrwBackend(t, s) == want {
			return s
		}
	}
	t.Fatalf("no session of %s places on %s", prefix, want)
	return ""
}

// readyStates returns /readyz's status code and per-backend states.
func readyStates(t *testing.T, g http.Handler) (int, map[string]string) {
	t.Helper()
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var body struct {
		Backends map[string]string `json:"backends"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec.Code, body.Backends
}

// metricState returns the state agentserve_backend_state reports as 1 for id, and
// agentserve_backend_up's value.
func metricState(t *testing.T, g http.Handler, id string) (state, up string) {
	t.Helper()
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text := rec.Body.String()
	if m := regexp.MustCompile(`(?m)^` + gateway.MetricBackendState + `\{backend="` + id + `",state="(\w+)"\} 1$`).
		FindStringSubmatch(text); m != nil {
		state = m[1]
	}
	if m := regexp.MustCompile(`(?m)^` + gateway.MetricBackendUp + `\{backend="` + id + `"\} (\d)$`).
		FindStringSubmatch(text); m != nil {
		up = m[1]
	}
	return state, up
}

// backends[].drain drains b1 at start and on a reload, and false again undrains it: a
// session bound to b1 keeps being sent there (a hit), a new session HRW places on b1
// and a request without a session go elsewhere, and /readyz and agentserve_backend_state
// say "draining". A reload that only flips drain rebuilds neither the Scheduler nor the
// prober and moves no binding. (Before: the key was refused as unknown, and nothing in
// the gateway could drain a backend.)
func TestConfigDrain(t *testing.T) {
	tests := []struct {
		name      string
		start     bool // b1's drain in the config New gets
		reload    []bool
		wantState health.State // b1's state at the end
		wantLog   string       // in the reload's log line ("" with no reload)
	}{
		{"start drained", true, nil, health.Draining, ""},
		{"reload to drain", false, []bool{true}, health.Draining, `"drained":["b1"],"undrained":null`},
		{"reload to undrain", true, []bool{false}, health.Healthy, `"drained":null,"undrained":["b1"]`},
		{"drain, undrain, drain", false, []bool{true, false, true}, health.Draining, `"drained":["b1"]`},
		// The same config: nothing to apply, said once (TestReloadUnchangedConfig).
		{"unchanged reload", true, []bool{true}, health.Draining, `"msg":"config unchanged; nothing to apply"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			urls := jsonBackends(t, 3)
			logger, logs := captureLogs()
			g, err := gateway.New(drainConfig(t, urls, tt.start, ""), gateway.WithLogger(logger))
			require.NoError(t, err)
			t.Cleanup(g.Close)

			// A session bound to b1 while b1 takes new sessions (before the drain, or
			// undrained for a moment through the Scheduler as an embedder could).
			bound := sessionOn(t, "bound", "b1")
			if tt.start {
				g.Scheduler().Undrain("b1")
			}
			rec := send(t, g, bound)
			require.Equal(t, http.StatusOK, rec.Code)
			require.Equal(t, "b1", rec.Header().Get(gateway.HeaderBackend))
			if tt.start {
				g.Scheduler().OnBackendDraining("b1")
			}
			sched := g.Scheduler()
			prev := tt.start
			for _, d := range tt.reload {
				require.NoError(t, g.Reload(drainConfig(t, urls, d, "")))
				if d != prev { // a change (the same config logs "config unchanged")
					assert.Contains(t, logs.String(), `"affinity_rebuilt":false,"bindings_copied":0,"prober_rebuilt":false`)
				}
				prev = d
			}
			if tt.wantLog != "" {
				assert.Contains(t, logs.String(), tt.wantLog)
			}
			assert.Same(t, sched, g.Scheduler(), "no Scheduler rebuilt")
			assert.Equal(t, tt.wantState, g.Scheduler().Health().State("b1"))

			// The bound session stays on b1 whatever the drain.
			rec = send(t, g, bound)
			require.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, "b1", rec.Header().Get(gateway.HeaderBackend))
			assert.Equal(t, "hit", rec.Header().Get("X-Agent-Serve-Outcome"))

			// A new session HRW places on b1, and requests without a session hashed
			// there, go elsewhere while it is drained.
			fresh := sessionOn(t, "fresh", "b1")
			rec = send(t, g, fresh)
			require.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, "miss", rec.Header().Get("X-Agent-Serve-Outcome"))
			models := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
			models.Header.Set("X-Session-ID", sessionOn(t, "models", "b1"))
			mrec := httptest.NewRecorder()
			g.ServeHTTP(mrec, models)
			require.Equal(t, http.StatusOK, mrec.Code)
			code, states := readyStates(t, g)
			assert.Equal(t, http.StatusOK, code)
			state, up := metricState(t, g, "b1")
			if tt.wantState == health.Draining {
				assert.NotEqual(t, "b1", rec.Header().Get(gateway.HeaderBackend), "a new session avoids a drained backend")
				assert.NotEqual(t, "b1", mrec.Header().Get(gateway.HeaderBackend), "so does a request without a binding")
				assert.Equal(t, map[string]string{"b0": "healthy", "b1": "draining", "b2": "healthy"}, states)
				assert.Equal(t, "draining", state)
			} else {
				assert.Equal(t, "b1", rec.Header().Get(gateway.HeaderBackend))
				assert.Equal(t, "b1", mrec.Header().Get(gateway.HeaderBackend))
				assert.Equal(t, "healthy", states["b1"])
				assert.Equal(t, "healthy", state)
			}
			assert.Equal(t, "1", up, "a drained backend can take requests")
		})
	}
}

// Health stays independent of backends[].drain: a drained backend that fails its active
// check is Down (on /readyz and in the metrics), Draining again once it passes, not
// Healthy; undrained while Down it stays Down, then comes back Healthy.
func TestConfigDrainAndHealth(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(flaky.Close)
	urls := jsonBackends(t, 3)
	urls[1] = flaky.URL
	const hc = "health: {enabled: true, failure_threshold: 1, success_threshold: 1}\n"
	g, err := gateway.New(drainConfig(t, urls, true, hc))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ctx := context.Background()

	steps := []struct {
		name    string
		healthy bool
		undrain bool // reload with drain: false first
		want    string
	}{
		{"passing", true, false, "draining"},
		{"failing", false, false, "down"},
		{"passing again", true, false, "draining"},
		{"failing again", false, false, "down"},
		{"undrained while down", false, true, "down"},
		{"passing after the undrain", true, false, "healthy"},
	}
	for _, st := range steps {
		if st.undrain {
			require.NoError(t, g.Reload(drainConfig(t, urls, false, hc)), st.name)
		}
		healthy.Store(st.healthy)
		g.ProbeOnce(ctx)
		_, states := readyStates(t, g)
		assert.Equal(t, st.want, states["b1"], st.name)
		state, _ := metricState(t, g, "b1")
		assert.Equal(t, st.want, state, st.name)
	}
}

// backends[].drain is a bool: another type is refused, and a misspelt key too. (yaml.v3
// also takes YAML 1.1's yes/no/on/off for a bool, as for every bool key of the config.)
func TestConfigDrainValidation(t *testing.T) {
	tests := []struct {
		name string
		item string
		want error
	}{
		{"true", "drain: true", nil},
		{"false", "drain: false", nil},
		{"a string", "drain: maybe", gateway.ErrConfigSyntax},
		{"a quoted bool", `drain: "true"`, gateway.ErrConfigSyntax},
		{"a number", "drain: 1", gateway.ErrConfigSyntax},
		{"misspelt", "drian: true", gateway.ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte("backends:\n  - {id: b0, url: \"http://127.0.0.1:1\", " + tt.item + "}\n"))
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, gateway.ErrInvalidConfig)
			require.ErrorIs(t, err, tt.want)
		})
	}
}

// A reload that drains b1 and changes the affinity section (a new Scheduler, the bindings
// copied over) keeps the drain and the bound session on b1, and a reload that removes
// the drained backend then makes its session rebind elsewhere on its next turn.
func TestConfigDrainWithAffinityRebuildAndRemoval(t *testing.T) {
	urls := jsonBackends(t, 3)
	logger, logs := captureLogs()
	g, err := gateway.New(drainConfig(t, urls, false, ""), gateway.WithLogger(logger))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	bound := sessionOn(t, "bound", "b1")
	require.Equal(t, "b1", send(t, g, bound).Header().Get(gateway.HeaderBackend))
	sched := g.Scheduler()

	require.NoError(t, g.Reload(drainConfig(t, urls, true, "affinity: {sticky_ttl_seconds: 600}\n")))
	assert.NotSame(t, sched, g.Scheduler(), "the affinity change rebuilt the Scheduler")
	assert.Contains(t, logs.String(), `"drained":["b1"],"undrained":null,"affinity_rebuilt":true`)
	assert.Equal(t, health.Draining, g.Scheduler().Health().State("b1"))
	rec := send(t, g, bound)
	assert.Equal(t, "b1", rec.Header().Get(gateway.HeaderBackend))
	assert.Equal(t, "hit", rec.Header().Get("X-Agent-Serve-Outcome"))

	// Removed: not a candidate (logged under "draining"), gone from /readyz, and its
	// session rebinds on its next turn.
	require.NoError(t, g.Reload(yamlConfig(t, []string{urls[0], urls[2]}, []string{"b0", "b2"}, []float64{1, 1},
		"affinity: {sticky_ttl_seconds: 600}\n")))
	assert.Contains(t, logs.String(), `"removed":["b1"]`)
	_, states := readyStates(t, g)
	assert.Equal(t, map[string]string{"b0": "healthy", "b2": "healthy"}, states)
	rec = send(t, g, bound)
	assert.NotEqual(t, "b1", rec.Header().Get(gateway.HeaderBackend))
	assert.Equal(t, "rebind", rec.Header().Get("X-Agent-Serve-Outcome"))
}
