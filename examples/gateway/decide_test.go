package gateway_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func decideReq(body string, headers map[string]string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, chat, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

// Decide routes like ServeHTTP without proxying: same binding, same counters.
func TestDecide(t *testing.T) {
	g, backends := testGateway(t, "")
	d, err := g.Decide(decideReq(chatBody, map[string]string{"X-Session-ID": "s1"}), []byte(chatBody), nil)
	require.NoError(t, err)
	assert.False(t, d.AffinityHit)
	assert.Equal(t, chatBody, string(d.Body))
	assert.Equal(t, "", d.Tier)
	require.NotNil(t, d.URL)
	rec := do(t, g, chat, chatBody, map[string]string{"X-Session-ID": "s1"})
	assert.Equal(t, d.BackendID, rec.Header().Get(gateway.HeaderBackend), "the proxy path finds Decide's binding")
	assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit))
	assert.Len(t, backends.bodies, 1, "Decide itself sent nothing")

	// allow restricts the candidates; an empty subset is a 503.
	for _, id := range []string{"b0", "b1", "b2"} {
		d, err := g.Decide(decideReq(chatBody, map[string]string{"X-Session-ID": "sub-" + id}), []byte(chatBody),
			func(b string) bool { return b == id })
		require.NoError(t, err)
		assert.Equal(t, id, d.BackendID)
	}
	_, err = g.Decide(decideReq(chatBody, map[string]string{"X-Session-ID": "s9"}), []byte(chatBody), func(string) bool { return false })
	var re *gateway.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, http.StatusServiceUnavailable, re.Status)
	assert.ErrorIs(t, err, affinity.ErrNoCandidates)
}

// The same errors with tenant scoping on, for a request without a tenant identity (the
// anonymous tenant): its session ID is held to max_session_id_bytes, not to the
// Scheduler's limit with room for the tag.
func TestDecideErrors(t *testing.T) {
	for _, extra := range []string{"", "tenant: {api_key: true}\n"} {
		t.Run(extra, func(t *testing.T) { testDecideErrors(t, extra) })
	}
}

func testDecideErrors(t *testing.T, extra string) {
	g, _ := testGateway(t, "require_session: true\naffinity: {max_session_id_bytes: 8}\n"+extra)
	tests := []struct {
		name    string
		body    string
		headers map[string]string
		status  int
		code    string
	}{
		{"malformed body", `{"model":`, map[string]string{"X-Session-ID": "s"}, 400, "invalid_json"},
		{"unknown tier", chatBody, map[string]string{"X-Session-ID": "s", "X-Agent-Serve-Tier": "gold"}, 400, "unknown_tier"},
		{"missing session", chatBody, nil, 400, "missing_session_id"},
		{"session too long", chatBody, map[string]string{"X-Session-ID": "123456789"}, 400, "session_id_too_long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := g.Decide(decideReq(tt.body, tt.headers), []byte(tt.body), nil)
			var re *gateway.RequestError
			require.True(t, errors.As(err, &re), "got %v", err)
			assert.Equal(t, tt.status, re.Status)
			assert.Equal(t, tt.code, re.Code)
		})
	}
	assert.Zero(t, g.Scheduler().Len())
}
