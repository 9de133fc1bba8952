package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

const chat = "/v1/chat/completions"
const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func TestDefaultSessionHeadersIncludeOpenCode(t *testing.T) {
	assert.Equal(t, []string{"X-Session-ID", "X-Claude-Code-Session-Id", "Session-Id", "Session_id",
		"X-Opencode-Session", "X-Session-Affinity"}, gateway.DefaultSessionHeaders())
	assert.Equal(t, []string{"X-Parent-Session-ID"}, gateway.DefaultParentSessionHeaders())
	cfg, err := gateway.ParseConfig([]byte(minimal))
	require.NoError(t, err)
	assert.Equal(t, gateway.DefaultParentSessionHeaders(), cfg.ParentSessionHeaders)
	cfg, err = gateway.ParseConfig([]byte(minimal + "parent_session_headers: []\n"))
	require.NoError(t, err)
	assert.Empty(t, cfg.ParentSessionHeaders, "an explicit empty list turns parent placement off")
	_, err = gateway.ParseConfig([]byte(minimal + "parent_session_headers: [\"bad header\"]\n"))
	assert.ErrorIs(t, err, gateway.ErrHeaderName)
}

// When several session headers are present, the first in session_headers order wins.
func TestSessionHeaderPrecedence(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"OpenCode x-session-affinity alone", map[string]string{"x-session-affinity": "oc-1"}, "oc-1"},
		{"older OpenCode header wins over x-session-affinity", map[string]string{"X-Opencode-Session": "old", "X-Session-Affinity": "new"}, "old"},
		{"generic header wins over everything", map[string]string{
			"X-Session-ID": "gen", "X-Claude-Code-Session-Id": "cc", "Session-Id": "codex", "X-Session-Affinity": "oc"}, "gen"},
		{"Claude Code wins over Codex and OpenCode", map[string]string{
			"X-Claude-Code-Session-Id": "cc", "Session-Id": "codex", "X-Session-Affinity": "oc"}, "cc"},
		{"Codex wins over OpenCode", map[string]string{"Session-Id": "codex", "X-Session-Affinity": "oc"}, "codex"},
		{"a blank header is skipped", map[string]string{"X-Session-ID": "  ", "X-Session-Affinity": "oc"}, "oc"},
		{"the parent header is not a session header", map[string]string{"X-Parent-Session-ID": "p", "X-Session-Affinity": "oc"}, "oc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := testGateway(t, "")
			rec := do(t, g, chat, chatBody, tt.headers)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			assert.Equal(t, 1, g.Scheduler().Len())
			_, ok := g.Scheduler().Lookup(tt.want, "")
			assert.True(t, ok, "bound under %q", tt.want)
		})
	}
}

// childAwayFrom returns a session ID whose HRW backend is not id.
func childAwayFrom(t *testing.T, id string) string {
	t.Helper()
	for i := range 100 {
		c := fmt.Sprintf("child-%d", i)
		if hrwBackend(t, c) != id {
			return c
		}
	}
	t.Fatal("no child session away from " + id)
	return ""
}

func TestParentSessionPlacement(t *testing.T) {
	g, _ := testGateway(t, "")
	rec := do(t, g, chat, chatBody, map[string]string{"X-Session-Affinity": "main"})
	require.Equal(t, http.StatusOK, rec.Code)
	parentBackend := rec.Header().Get(gateway.HeaderBackend)
	child := childAwayFrom(t, parentBackend)

	rec = do(t, g, chat, chatBody, map[string]string{"X-Session-Affinity": child, "X-Parent-Session-ID": "main"})
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, parentBackend, rec.Header().Get(gateway.HeaderBackend), "the subagent starts on its parent's backend")
	assert.Equal(t, "false", rec.Header().Get(gateway.HeaderAffinityHit), "counted as a miss")
	rec = do(t, g, chat, chatBody, map[string]string{"X-Session-Affinity": child, "X-Parent-Session-ID": "main"})
	assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit), "afterwards its own binding")
	assert.Equal(t, parentBackend, rec.Header().Get(gateway.HeaderBackend))

	st := g.Scheduler().Stats()
	assert.Equal(t, uint64(1), st.ParentPlaced)
	assert.Equal(t, uint64(2), st.Misses)
	m := httptest.NewRecorder()
	g.ServeHTTP(m, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(m.Body)
	assert.Contains(t, string(body), `agentserve_affinity_parent_placed_total{tier="default"} 1`)

	// An unknown parent: plain HRW.
	other := childAwayFrom(t, parentBackend) + "-x"
	rec = do(t, g, chat, chatBody, map[string]string{"X-Session-Affinity": other, "X-Parent-Session-ID": "nobody"})
	assert.Equal(t, hrwBackend(t, other), rec.Header().Get(gateway.HeaderBackend))
	assert.Equal(t, uint64(1), g.Scheduler().Stats().ParentPlaced)
}

// TestParentSessionPlacementUnderLoad: with affinity.load on, a subagent's first turn
// follows its parent's backend only while that backend passes the spill guard; loaded
// far beyond it (a flood of long streams), the child is placed like a new session.
// With disable_spill the hint ignores load.
func TestParentSessionPlacementUnderLoad(t *testing.T) {
	tests := []struct {
		name       string
		load       string
		wantParent bool
	}{
		{name: "guard declines", load: "affinity: {load: {balance_factor: 1.25, spill_cost_weight: 1}}\n"},
		{name: "disable_spill", load: "affinity: {load: {balance_factor: 1.25, disable_spill: true}}\n", wantParent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := testGateway(t, tt.load)
			rec := do(t, g, chat, chatBody, map[string]string{"X-Session-Affinity": "main"})
			require.Equal(t, http.StatusOK, rec.Code)
			parentBackend := rec.Header().Get(gateway.HeaderBackend)
			var busy affinity.Lease // 24 long streams' worth of prefill queued on the parent's backend
			require.NoError(t, g.Scheduler().LeaseBackend(affinity.MustBackend(parentBackend, "", 1), 24_000, &busy))
			defer busy.Done(affinity.DoneInfo{})

			child := childAwayFrom(t, parentBackend)
			rec = do(t, g, chat, chatBody, map[string]string{"X-Session-Affinity": child, "X-Parent-Session-ID": "main"})
			require.Equal(t, http.StatusOK, rec.Code)
			if tt.wantParent {
				assert.Equal(t, parentBackend, rec.Header().Get(gateway.HeaderBackend))
				assert.Equal(t, uint64(1), g.Scheduler().Stats().ParentPlaced)
			} else {
				assert.Equal(t, hrwBackend(t, child), rec.Header().Get(gateway.HeaderBackend), "placed like a new session")
				assert.Zero(t, g.Scheduler().Stats().ParentPlaced)
			}
			assert.Equal(t, "miss", rec.Header().Get(gateway.HeaderOutcome))
		})
	}
}

func TestParentSessionHeaderPrecedenceAndOff(t *testing.T) {
	g, _ := testGateway(t, "parent_session_headers: [X-Parent-Session-ID, X-Agent-Parent]\n")
	rec := do(t, g, chat, chatBody, map[string]string{"X-Session-ID": "main"})
	parentBackend := rec.Header().Get(gateway.HeaderBackend)
	child := childAwayFrom(t, parentBackend)
	rec = do(t, g, chat, chatBody, map[string]string{"X-Session-ID": child, "X-Parent-Session-ID": "main", "X-Agent-Parent": "nobody"})
	assert.Equal(t, parentBackend, rec.Header().Get(gateway.HeaderBackend), "the first parent header wins")

	off, _ := testGateway(t, "parent_session_headers: []\n")
	do(t, off, chat, chatBody, map[string]string{"X-Session-ID": "main"})
	rec = do(t, off, chat, chatBody, map[string]string{"X-Session-ID": child, "X-Parent-Session-ID": "main"})
	assert.Equal(t, hrwBackend(t, child), rec.Header().Get(gateway.HeaderBackend), "parent placement off")
	assert.Zero(t, off.Scheduler().Stats().ParentPlaced)
}
