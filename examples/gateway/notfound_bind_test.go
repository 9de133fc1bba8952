package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// notFoundGateway is a gateway over three backends that answer 200 on
// /v1/chat/completions, 405 on /v1/get-only/completions, 503 on /v1/busy/completions and
// 404 elsewhere.
func notFoundGateway(t *testing.T, extra string) *gateway.Gateway {
	t.Helper()
	return gatewayOver3(t, extra, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case chat:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		case "/v1/get-only/completions":
			w.WriteHeader(http.StatusMethodNotAllowed)
		case "/v1/busy/completions":
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	})
}

// A generation call whose placement stored a new binding (a miss or a rebind) and whose
// backend answers 404 or 405 — the path does not exist there — leaves no binding behind.
// An existing binding (a hit) survives such an answer, and any other status (a 503
// included) keeps the new binding. (Before: every POST to .../completions bound,
// whatever the backend answered.)
func TestNotFoundGenerationCallLeavesNoBinding(t *testing.T) {
	tests := []struct {
		path      string
		wantBound bool
	}{
		{"/nope/completions", false},
		{"/v1/nope/chat/completions", false},
		{"/v1/get-only/completions", false},
		{"/v1/busy/completions", true},
		{chat, true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			g := notFoundGateway(t, "")
			rec := sendReq(g, http.MethodPost, tt.path, chatBody, map[string]string{"X-Session-ID": "s1"})
			require.Equal(t, "miss", rec.Header().Get(gateway.HeaderOutcome))
			_, ok := g.Scheduler().Lookup("s1", "")
			assert.Equal(t, tt.wantBound, ok)
		})
	}
	t.Run("an existing binding survives a 404", func(t *testing.T) {
		g := notFoundGateway(t, "")
		require.Equal(t, "miss", sendReq(g, http.MethodPost, chat, chatBody, map[string]string{"X-Session-ID": "s1"}).Header().Get(gateway.HeaderOutcome))
		rec := sendReq(g, http.MethodPost, "/nope/completions", chatBody, map[string]string{"X-Session-ID": "s1"})
		require.Equal(t, http.StatusNotFound, rec.Code)
		require.Equal(t, "hit", rec.Header().Get(gateway.HeaderOutcome))
		_, ok := g.Scheduler().Lookup("s1", "")
		assert.True(t, ok)
	})
}

// A flood of POST .../completions to a path the backends answer 404, each with a fresh
// session ID, does not evict another session's binding from a small table. (Before:
// each bound, and the victim's binding was evicted.)
func TestNotFoundGenerationFloodKeepsBindings(t *testing.T) {
	g := notFoundGateway(t, "affinity: {max_bindings: 4}\n")
	victim := func() string {
		return sendReq(g, http.MethodPost, chat, chatBody, map[string]string{"X-Session-ID": "victim"}).Header().Get(gateway.HeaderOutcome)
	}
	require.Equal(t, "miss", victim())
	for i := range 300 {
		rec := sendReq(g, http.MethodPost, "/nope/completions", `{}`, map[string]string{"X-Session-ID": fmt.Sprint("flood-", i)})
		require.Equal(t, http.StatusNotFound, rec.Code)
	}
	assert.Equal(t, "hit", victim(), "the victim's binding survived")
	assert.Equal(t, 1, g.Scheduler().Len(), "only the victim is bound")
	assert.Zero(t, g.Scheduler().Stats().Evictions)
}

// A reload that builds a new Scheduler (an affinity change) while a first turn waits for
// its backend's 404 copies the new binding over; the 404 must remove it there too, from
// the Scheduler serving the next turn. (Before: it was removed from the old one only,
// and the next turn was a hit on a path that did not exist.)
func TestNotFoundAcrossReloadLeavesNoBinding(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var yaml strings.Builder
	yaml.WriteString("health: {enabled: false}\nbackends:\n")
	for _, id := range []string{"b0", "b1", "b2"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-release
			http.NotFound(w, r)
		}))
		t.Cleanup(srv.Close)
		yaml.WriteString("  - {id: " + id + ", url: \"" + srv.URL + "\"}\n")
	}
	cfg, err := gateway.ParseConfig([]byte(yaml.String()))
	require.NoError(t, err)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	before := g.Scheduler()

	done := make(chan *httptest.ResponseRecorder)
	go func() {
		done <- sendReq(g, http.MethodPost, "/nope/completions", chatBody, map[string]string{"X-Session-ID": "s1"})
	}()
	<-arrived // placed and bound; the backend holds the answer
	changed, err := gateway.ParseConfig([]byte(yaml.String() + "affinity: {sticky_ttl_seconds: 900}\n"))
	require.NoError(t, err)
	require.NoError(t, g.Reload(changed))
	require.NotSame(t, before, g.Scheduler(), "an affinity change builds a new Scheduler")
	_, copied := g.Scheduler().Lookup("s1", "")
	require.True(t, copied, "the reload copied the new binding")
	close(release)
	rec := <-done
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Equal(t, "miss", rec.Header().Get(gateway.HeaderOutcome))
	_, ok := g.Scheduler().Lookup("s1", "")
	assert.False(t, ok, "the current Scheduler keeps no binding after the 404")
	_, ok = before.Lookup("s1", "")
	assert.False(t, ok, "nor the old one")
}
