package fakevllm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

// The worked example of the package doc: BlockTokens 4 -> 16-byte blocks.
// system "a"*200 + user "hi" renders to 282 bytes = 71 tokens, 17 full blocks.
func TestPrefixCacheHitsAndMisses(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{BlockTokens: 4}, noSleep)
	sys := strings.Repeat("a", 200)
	prompt := fakevllm.RenderPrompt(nil, []fakevllm.Message{{Role: "system", Content: sys}, {Role: "user", Content: "hi"}})
	require.Len(t, prompt, 282)

	steps := []struct {
		name       string
		messages   any
		wantPrompt int
		wantCached int
	}{
		{"cold", msgs("system", sys, "user", "hi"), 71, 0},
		{"same prompt: all 17 blocks hit", msgs("system", sys, "user", "hi"), 71, 68},
		// "ho" differs at byte 19+200+11+17 = 247, in block 15: blocks 0..14 hit.
		{"same system prompt, other user turn", msgs("system", sys, "user", "ho"), 71, 60},
		// Differs at byte 19 (block 1): only block 0 "<|im_start|>syst" is shared.
		{"other system prompt", msgs("system", strings.Repeat("b", 200), "user", "hi"), 71, 4},
		// 288 bytes = exactly 18 blocks, 72 tokens: cold.
		{"exact multiple, cold", msgs("system", sys, "user", "hi012345"), 72, 60},
		// All 18 blocks cached, but the last one is recomputed: 17*4.
		{"exact multiple, warm: last block recomputed", msgs("system", sys, "user", "hi012345"), 72, 68},
	}
	var queried, cached uint64
	for _, st := range steps {
		c := chat(t, ts.URL, map[string]any{"model": "m", "messages": st.messages, "max_tokens": 3})
		assert.Equal(t, st.wantPrompt, c.Usage.PromptTokens, st.name)
		assert.Equal(t, st.wantCached, c.Usage.PromptTokensDetails.CachedTokens, st.name)
		assert.Equal(t, 3, c.Usage.CompletionTokens, st.name)
		assert.Equal(t, st.wantPrompt+3, c.Usage.TotalTokens, st.name)
		queried += uint64(st.wantPrompt)
		cached += uint64(st.wantCached)
	}
	s := srv.Stats()
	assert.Equal(t, uint64(len(steps)), s.Requests)
	assert.Equal(t, uint64(len(steps)), s.Completed)
	assert.Equal(t, queried, s.QueriedTokens)
	assert.Equal(t, cached, s.CachedTokens)
	assert.Equal(t, uint64(3*len(steps)), s.CompletionTokens)
	assert.Zero(t, s.EvictedBlocks)
}

// Capacity 5 blocks of 16 bytes. A user message of 20 bytes renders to 70 bytes: 4 full
// blocks, 18 tokens. Every prompt shares block 0 ("<|im_start|>user").
func TestPrefixCacheLRUEviction(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{BlockTokens: 4, CacheBlocks: 5}, noSleep)
	a := msgs("user", strings.Repeat("a", 20))
	b := msgs("user", strings.Repeat("b", 20))
	cachedOf := func(m any) int {
		return chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 1}).Usage.PromptTokensDetails.CachedTokens
	}

	assert.Equal(t, 0, cachedOf(a)) // cache: S A1 A2 A3
	assert.Equal(t, 4, srv.Stats().CacheBlocks)
	assert.Equal(t, 4, cachedOf(b)) // S hits; inserting B3 B2 B1 evicts A3 then A2 (tails first)
	st := srv.Stats()
	assert.Equal(t, 5, st.CacheBlocks)
	assert.Equal(t, uint64(2), st.EvictedBlocks)
	assert.Equal(t, 8, cachedOf(a)) // S A1 still there, A2 gone -> 2 blocks; reinserting A2 A3 evicts B3 B2
	assert.Equal(t, 8, cachedOf(b)) // S B1 hit
	assert.Equal(t, 5, srv.Stats().CacheBlocks)
	assert.Equal(t, uint64(6), srv.Stats().EvictedBlocks)
}

// cache_salt is read as vLLM reads it: by its exact name (the last of duplicates), so a
// key that only Go's case-folding decoder would take ("CACHE_SALT", "cache_ſalt") leaves
// the request unsalted; a body with a non-JSON Content-Type is refused (FastAPI does not
// parse it as JSON), as is a salt that is not a string.
func TestCacheSaltExactName(t *testing.T) {
	_, ts := start(t, fakevllm.Config{BlockTokens: 4}, noSleep)
	send := func(prompt, salt, contentType string) (int, int) {
		t.Helper()
		body := `{"model":"m","max_tokens":1,` + salt + `"messages":[{"role":"user","content":"` + prompt + `"}]}`
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var c completion
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		if resp.StatusCode == http.StatusOK {
			require.NoError(t, json.Unmarshal(raw, &c))
		}
		return resp.StatusCode, c.Usage.PromptTokensDetails.CachedTokens
	}
	tests := []struct {
		name, salt, contentType string
		status                  int
		warm                    bool // shares the cache of salt "a"
	}{
		{"same salt", `"cache_salt":"a",`, "application/json", 200, true},
		{"escaped name", `"cache\u005fsalt":"a",`, "application/json", 200, true},
		{"last duplicate wins", `"cache_salt":"b","cache_salt":"a",`, "application/json", 200, true},
		{"no Content-Type", `"cache_salt":"a",`, "", 200, true},
		{"+json Content-Type", `"cache_salt":"a",`, "application/vnd.x+json; charset=utf-8", 200, true},
		{"other case", `"CACHE_SALT":"a",`, "application/json", 200, false},
		{"folded s", `"cache_ſalt":"a",`, "application/json", 200, false},
		{"first duplicate only", `"cache_salt":"a","cache_salt":"b",`, "application/json", 200, false},
		{"multipart", `"cache_salt":"a",`, "multipart/form-data; boundary=x", 422, false},
		{"form", `"cache_salt":"a",`, "application/x-www-form-urlencoded", 422, false},
		{"not a string", `"cache_salt":5,`, "application/json", 422, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A salt of this case's own, so that its first request is cold; the prompt's
			// 27 blocks share at most the chat template's first block with other prompts.
			salt := fmt.Sprintf(`"s%d"`, i)
			prompt := fmt.Sprintf("prompt %d %s", i, strings.Repeat("x", 64))
			status, cached := send(prompt, `"cache_salt":`+salt+`,`, "application/json")
			require.Equal(t, http.StatusOK, status)
			require.Zero(t, cached)
			status, cached = send(prompt, strings.ReplaceAll(tt.salt, `"a"`, salt), tt.contentType)
			require.Equal(t, tt.status, status)
			assert.Equal(t, tt.warm, cached > 4, "cached %d", cached)
		})
	}
}

// With NoPromptTokensDetails the usage object, JSON and streamed, carries
// "prompt_tokens_details": null (vLLM without --enable-prompt-tokens-details); the cache
// works as before: its hits still show in /metrics.
func TestNoPromptTokensDetails(t *testing.T) {
	for _, tc := range []struct {
		omit bool
		want string
	}{
		{false, `"prompt_tokens_details":{"cached_tokens":68}`},
		{true, `"prompt_tokens_details":null`},
	} {
		t.Run(fmt.Sprint(tc.omit), func(t *testing.T) {
			_, ts := start(t, fakevllm.Config{BlockTokens: 4, NoPromptTokensDetails: tc.omit}, noSleep)
			m := msgs("system", strings.Repeat("a", 200), "user", "hi")
			chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 1}) // warm the cache
			for _, body := range []map[string]any{
				{"messages": m, "max_tokens": 1},
				{"messages": m, "max_tokens": 1, "stream": true, "stream_options": map[string]any{"include_usage": true}},
			} {
				resp, raw := post(t, t.Context(), ts.URL, body)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Contains(t, string(raw), tc.want, "stream %v", body["stream"])
			}
			resp, err := http.Get(ts.URL + "/metrics")
			require.NoError(t, err)
			defer resp.Body.Close()
			text, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Contains(t, string(text), `vllm:prefix_cache_hits_total{backend="fakevllm",model_name="fake-model"} 136`)
		})
	}
}
