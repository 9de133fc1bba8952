package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/fakevllm"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Backends that do not report cached tokens (fakevllm's NoPromptTokensDetails: vLLM's
// default, without --enable-prompt-tokens-details) must not make sessions ping-pong:
// with examples/configs/gateway.yaml's load block, every turn finds its bound backend
// busy (3 reported requests, 3072 tokens: less than spill_cost_weight x the prefix), and
// sessions stay, as they do with backends that report. Before the fix, each hit without
// details marked the binding's cache lost and the next busy turn moved it (tester19 #2:
// 327 spills in 1,032 turns). The three usage paths are covered: a JSON body the gateway
// reads whole (inject_metadata), one streamed through (its tail), and the SSE usage chunk.
func TestUnreportedCachedTokensDoNotMoveSessions(t *testing.T) {
	file, err := gateway.LoadConfig("../configs/gateway.yaml")
	require.NoError(t, err)
	require.Positive(t, file.Affinity.Load.BalanceFactor, "the shipped config turns load awareness on")
	const sessions, turns = 6, 12
	for _, omit := range []bool{true, false} {
		for _, path := range []string{"json", "json-tail", "sse"} {
			t.Run(fmt.Sprintf("no_details=%v/%s", omit, path), func(t *testing.T) {
				cfg := gateway.Config{Health: gateway.HealthConfig{Enabled: new(false)}}
				cfg.Affinity.Load = file.Affinity.Load
				if path == "json-tail" {
					cfg.InjectMetadata = new(false)
				}
				var ids []string
				for i := range 3 {
					srv, err := fakevllm.New(fakevllm.Config{ID: fmt.Sprintf("v%d", i), DefaultMaxTokens: 4, NoPromptTokensDetails: omit},
						fakevllm.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }))
					require.NoError(t, err)
					ts := httptest.NewServer(srv)
					t.Cleanup(ts.Close)
					ids = append(ids, srv.Config().ID)
					cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: srv.Config().ID, URL: ts.URL})
				}
				g, err := gateway.New(cfg)
				require.NoError(t, err)
				t.Cleanup(g.Close)
				sched := g.Scheduler()

				system := strings.Repeat("You are a careful coding agent. ", 125) // 4,000 bytes
				spills := map[string]int{}
				for turn := range turns {
					for s := range sessions {
						sid := fmt.Sprintf("sess-%d", s)
						if bound, ok := sched.Lookup(sid, ""); ok { // the bound backend is busy
							for _, id := range ids {
								waiting := int64(0)
								if id == bound {
									waiting = 3
								}
								require.NoError(t, sched.ReportLoad(id, affinity.BackendLoad{Waiting: waiting}))
							}
						}
						msgs := []map[string]string{{"role": "system", "content": system}}
						for k := 0; k <= turn; k++ {
							msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("step %d: %s", k, strings.Repeat("x", 2000))})
						}
						req := map[string]any{"model": "m", "messages": msgs}
						if path == "sse" {
							req["stream"], req["stream_options"] = true, map[string]any{"include_usage": true}
						}
						body, err := json.Marshal(req)
						require.NoError(t, err)
						rec := do(t, g, "/v1/chat/completions", string(body), map[string]string{"X-Session-ID": sid})
						require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
						if rec.Header().Get(gateway.HeaderOutcome) == "spill" {
							spills[sid]++
						}
					}
				}
				t.Logf("moves per session: %v", spills)
				for s := range sessions {
					sid := fmt.Sprintf("sess-%d", s)
					assert.LessOrEqual(t, spills[sid], len(ids)-1, "%s: %d moves in %d busy turns (at most n-1: no ping-pong)", sid, spills[sid], turns-1)
				}
				for _, id := range ids {
					assert.Zero(t, sched.Load(id).Requests, "%s: every lease released", id)
				}
				if reuse := sched.Reuse(""); omit {
					assert.Equal(t, affinity.TierReuse{}, reuse, "unreported reuse is unknown, not 0 %")
				} else {
					assert.Greater(t, reuse.Ratio(), 0.9, "warm hits report their cached prefix")
				}
			})
		}
	}
}
