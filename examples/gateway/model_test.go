package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// The tier follows the "model" the backend serves: of duplicate top-level "model" keys
// the last wins (encoding/json, the cache_salt rewrite and vLLM's Python json agree),
// whether the values are written with escapes or not, and keys match exactly after
// unescaping (vLLM reads "model", not "Model").
func TestDuplicateModelKeysLastWins(t *testing.T) {
	g, _ := testGateway(t, "model_tiers: {big: large}\n")
	for _, tc := range []struct {
		body, tier string
	}{
		{`{"model":"x","model":"big"}`, "large"},
		{`{"model":"\u0078","model":"big"}`, "large"},
		{`{"model":null,"model":"big"}`, "large"},
		{`{"model":"big","model":"x"}`, ""},
		{`{"model":"big","model":"\u0078"}`, ""},
		{`{"model":"big","model":null}`, ""},
		{`{"mod\u0065l":"x","model":"b\u0069g"}`, "large"},
		{`{"model":"\u0078","MODEL":"big"}`, ""},
		{`{"model":"x","Model":"big"}`, ""},
		{`{"model":"big","a":{"model":"x"}}`, "large"},
	} {
		t.Run(tc.body, func(t *testing.T) {
			rec := do(t, g, "/v1/chat/completions", tc.body, map[string]string{"X-Session-ID": "dup"})
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var resp struct {
				Meta gateway.Metadata `json:"x_agent_serve"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
			assert.Equal(t, tc.tier, resp.Meta.Tier)
		})
	}
	// A duplicate "model" that is not a string is the same 400 as a single one.
	rec := do(t, g, "/v1/chat/completions", `{"model":"big","model":5}`, map[string]string{"X-Session-ID": "dup"})
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Contains(t, rec.Body.String(), `\"model\" must be a string, got 5`)
}

// The body of an OpenAI- or Anthropic-compatible generation endpoint is JSON whatever
// Content-Type the client sent (curl -d sends application/x-www-form-urlencoded): its
// "model" picks the tier on /v1/messages as on the OpenAI paths (before: /v1/messages
// was not read, and the request went to the default tier).
func TestJSONEndpointsWhateverContentType(t *testing.T) {
	g, _ := testGateway(t, "model_tiers: {big: large}\n")
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/"} {
		t.Run(path, func(t *testing.T) {
			rec := do(t, g, path, `{"model":"big"}`, map[string]string{
				"X-Session-ID": "ct", "Content-Type": "application/x-www-form-urlencoded"})
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var resp struct {
				Meta gateway.Metadata `json:"x_agent_serve"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
			assert.Equal(t, "large", resp.Meta.Tier)
		})
	}
}
