package gateway_test

import (
	"encoding/json"
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

// agentAPIBackend answers POST /v1/responses (OpenAI Responses API, as vLLM does) and
// POST /v1/messages (Anthropic Messages API, in Anthropic's shape or vLLM's) with a JSON
// body or, for "stream": true, an event stream, each reporting a 4,096-token prompt of
// which 3,968 came from the prefix cache. fakevllm serves neither endpoint.
func agentAPIBackend(t *testing.T, vllmMessages bool) *httptest.Server {
	t.Helper()
	const prompt, cached, out = 4096, 3968, 9
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Stream bool }
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &req) != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		var text string
		switch r.URL.Path {
		case "/v1/responses":
			u := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,`+
				`"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`, prompt, cached, out, prompt+out)
			resp := `{"id":"resp_1","object":"response","model":"m","output":[{"type":"message","role":"assistant",` +
				`"content":[{"type":"output_text","text":"done"}]}],"status":"%s","usage":%s,"user":null}`
			if !req.Stream {
				text = fmt.Sprintf(resp, "completed", u)
				break
			}
			text = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":" +
				fmt.Sprintf(resp, "in_progress", "null") + "}\n\n" +
				"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"done\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":" +
				fmt.Sprintf(resp, "completed", u) + "}\n\n"
		case "/v1/messages":
			full := fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":0}`,
				prompt-cached, out, cached)
			if !req.Stream {
				text = `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"done"}],"model":"m",` +
					`"stop_reason":"end_turn","stop_sequence":null,"usage":` + full + `}`
				break
			}
			start, delta := full, fmt.Sprintf(`{"output_tokens":%d}`, out) // Anthropic
			if vllmMessages {
				start = fmt.Sprintf(`{"input_tokens":%d,"output_tokens":0}`, prompt)
				delta = full
			}
			text = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\"," +
				"\"content\":[],\"model\":\"m\",\"usage\":" + start + "}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"done\"}}\n\n" +
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":" + delta + "}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		default:
			http.NotFound(w, r)
			return
		}
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		_, _ = io.WriteString(w, text)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The usage of the Responses API (Codex CLI) and of the Anthropic Messages API (Claude
// Code) reaches the lease's Done on every path the gateway reads usage on — a JSON body
// read whole (inject_metadata), one streamed through, and an event stream — seen through
// the Scheduler's achieved reuse: the second turn of a session (an affinity hit) books
// its prompt and cached counts. Before, only chat/completions' usage was read and these
// turns booked nothing.
func TestAgentAPIUsageReachesLease(t *testing.T) {
	const prompt, cached = 4096, 3968
	for _, api := range []string{"/v1/responses", "/v1/messages", "/v1/messages (vLLM stream)"} {
		for _, path := range []string{"json", "json-tail", "sse"} {
			t.Run(api+"/"+path, func(t *testing.T) {
				vllm := api == "/v1/messages (vLLM stream)"
				srv := agentAPIBackend(t, vllm)
				cfg := gateway.Config{Health: gateway.HealthConfig{Enabled: new(false)},
					Backends: []gateway.BackendConfig{{ID: "b0", URL: srv.URL}}}
				if path == "json-tail" {
					cfg.InjectMetadata = new(false)
				}
				g, err := gateway.New(cfg)
				require.NoError(t, err)
				t.Cleanup(g.Close)
				body := `{"model":"m","max_tokens":16,"input":"run the tests","messages":[{"role":"user","content":"run the tests"}]`
				if path == "sse" {
					body += `,"stream":true`
				}
				body += "}"
				url := api
				if vllm {
					url = "/v1/messages"
				}
				for turn := range 2 {
					rec := do(t, g, url, body, map[string]string{"X-Session-ID": "agent-1"})
					require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
					assert.Equal(t, turn == 1, rec.Header().Get(gateway.HeaderAffinityHit) == "true", "turn %d", turn)
				}
				assert.Equal(t, affinity.TierReuse{PromptTokens: prompt, CachedPromptTokens: cached}, g.Scheduler().Reuse(""),
					"the hit's prompt and cached counts")
				assert.Zero(t, g.Scheduler().Load("b0").Requests, "every lease released")
			})
		}
	}
}
