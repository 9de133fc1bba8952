package fakevllm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

func TestRenderPromptAndTokens(t *testing.T) {
	got := fakevllm.RenderPrompt(nil, []fakevllm.Message{{Role: "system", Content: "S"}, {Role: "user", Name: "bob", Content: "hi"}})
	want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user name=bob\nhi<|im_end|>\n<|im_start|>assistant\n"
	assert.Equal(t, want, got)

	withTools := fakevllm.RenderPrompt(json.RawMessage(`[ {"type": "function"} ]`), []fakevllm.Message{{Role: "user", Content: "x"}})
	assert.Equal(t, "<|im_start|>tools\n[{\"type\":\"function\"}]<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n", withTools)

	for _, tc := range []struct {
		in   string
		want int
	}{{"", 0}, {"a", 1}, {"abcd", 1}, {"abcde", 2}, {strings.Repeat("x", 282), 71}} {
		assert.Equal(t, tc.want, fakevllm.EstimateTokens(tc.in), "len %d", len(tc.in))
	}
}

func TestMessageContentForms(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		wantErr        bool
	}{
		{"string", `{"role":"user","content":"hello"}`, "hello", false},
		{"null", `{"role":"assistant","content":null}`, "", false},
		{"parts", `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}`, "ab", false},
		{"number", `{"role":"user","content":42}`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m fakevllm.Message
			err := json.Unmarshal([]byte(tc.in), &m)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, m.Content)
		})
	}
}

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

func TestQueueFIFOAndLimit(t *testing.T) {
	g := newGate()
	// Decode 1s per token (before the gate), prefill negligible: decode calls identify requests.
	srv, ts := start(t, fakevllm.Config{MaxConcurrent: 1, PrefillPerToken: time.Nanosecond, DecodePerToken: time.Second},
		fakevllm.WithSleep(g.sleep))

	var wg sync.WaitGroup
	results := make([]completion, 3)
	send := func(i int) {
		wg.Go(func() {
			results[i] = chat(t, ts.URL, map[string]any{"messages": msgs("user", "req"), "max_tokens": i + 1})
		})
	}
	send(0)
	require.Eventually(t, func() bool { return len(g.recorded()) == 1 }, 5*time.Second, time.Millisecond)
	send(1)
	require.Eventually(t, func() bool { return srv.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond)
	send(2)
	require.Eventually(t, func() bool { return srv.Stats().Waiting == 2 }, 5*time.Second, time.Millisecond)

	st := srv.Stats()
	assert.Equal(t, 1, st.Running)
	assert.Len(t, g.recorded(), 1, "queued requests must not start")
	require.NoError(t, testutil.GatherAndCompare(srv.Registry(), strings.NewReader(`
# HELP vllm:num_requests_running [fakevllm simulator, not vLLM] Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{backend="fakevllm",model_name="fake-model"} 1
# HELP vllm:num_requests_waiting [fakevllm simulator, not vLLM] Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{backend="fakevllm",model_name="fake-model"} 2
`), "vllm:num_requests_running", "vllm:num_requests_waiting"))

	close(g.open)
	wg.Wait()
	var decodes []time.Duration
	for _, d := range g.recorded() {
		if d >= time.Second {
			decodes = append(decodes, d)
		}
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, decodes, "served in arrival order")
	for i, r := range results {
		assert.Equal(t, i+1, r.Usage.CompletionTokens)
	}
	st = srv.Stats()
	assert.Zero(t, st.Running)
	assert.Zero(t, st.Waiting)
	assert.Equal(t, uint64(3), st.Completed)
}

func TestCancellationFreesSlotAndQueue(t *testing.T) {
	g := newGate()
	srv, ts := start(t, fakevllm.Config{MaxConcurrent: 2}, fakevllm.WithSleep(g.sleep))

	var wg sync.WaitGroup
	ctxs := make([]context.CancelFunc, 3)
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		want := i + 1
		require.Eventually(t, func() bool { st := srv.Stats(); return st.Running+st.Waiting == want },
			5*time.Second, time.Millisecond)
	}
	st := srv.Stats()
	require.Equal(t, 2, st.Running)
	require.Equal(t, 1, st.Waiting)

	ctxs[2]() // the queued one leaves the queue
	require.Eventually(t, func() bool { return srv.Stats().Waiting == 0 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 2, srv.Stats().Running)

	ctxs[0]() // a running one stops and frees its slot
	ctxs[1]()
	require.Eventually(t, func() bool { return srv.Stats().Running == 0 }, 5*time.Second, time.Millisecond)
	wg.Wait()
	st = srv.Stats()
	assert.Equal(t, uint64(3), st.Cancelled)
	assert.Zero(t, st.Completed)
	close(g.open)

	// The server still works afterwards.
	c := chat(t, ts.URL, map[string]any{"messages": msgs("user", "again")})
	assert.Equal(t, fakevllm.DefaultMaxTokens, c.Usage.CompletionTokens)
}

func TestNonStreamingResponse(t *testing.T) {
	_, ts := start(t, fakevllm.Config{ID: "b7"}, noSleep)
	resp, raw := post(t, context.Background(), ts.URL, map[string]any{"model": "my-model", "messages": msgs("user", "hi"), "max_completion_tokens": 5})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "simulator", resp.Header.Get("X-Fakevllm"))
	assert.Equal(t, "b7", resp.Header.Get("X-Fakevllm-Backend"))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var c completion
	require.NoError(t, json.Unmarshal(raw, &c))
	assert.Equal(t, "chat.completion", c.Object)
	assert.Equal(t, "my-model", c.Model)
	require.Len(t, c.Choices, 1)
	assert.Equal(t, "assistant", c.Choices[0].Message.Role)
	assert.Equal(t, "[fakevllm simulator] simulated tokens from a", c.Choices[0].Message.Content)
	assert.Equal(t, "length", c.Choices[0].FinishReason)
	assert.Equal(t, 5, c.Usage.CompletionTokens)

	c = chat(t, ts.URL, map[string]any{"messages": msgs("user", "hi")})
	assert.Equal(t, "fake-model", c.Model)
	assert.Equal(t, "stop", c.Choices[0].FinishReason)
	assert.Equal(t, fakevllm.DefaultMaxTokens, c.Usage.CompletionTokens)
}

func TestStreamingSSE(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{BlockTokens: 4}, noSleep)
	body := map[string]any{"messages": msgs("system", strings.Repeat("a", 200), "user", "hi"), "max_tokens": 4,
		"stream": true, "stream_options": map[string]any{"include_usage": true}}
	chat(t, ts.URL, map[string]any{"messages": body["messages"], "max_tokens": 1}) // warm the cache

	resp, raw := post(t, context.Background(), ts.URL, body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Equal(t, "simulator", resp.Header.Get("X-Fakevllm"))

	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Choices []struct {
			Delta struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	var (
		chunks []chunk
		done   bool
	)
	events := strings.Split(string(raw), "\n\n")
	require.Equal(t, "", events[len(events)-1], "stream ends with a blank line")
	for _, ev := range events[:len(events)-1] {
		require.False(t, done, "nothing after [DONE]")
		data, ok := strings.CutPrefix(ev, "data: ")
		require.True(t, ok, "event %q", ev)
		if data == "[DONE]" {
			done = true
			continue
		}
		var c chunk
		require.NoError(t, json.Unmarshal([]byte(data), &c))
		chunks = append(chunks, c)
	}
	require.True(t, done)
	// role, 4 tokens, finish, usage
	require.Len(t, chunks, 7)
	var text strings.Builder
	for i, c := range chunks {
		assert.Equal(t, "chat.completion.chunk", c.Object)
		assert.Equal(t, chunks[0].ID, c.ID)
		switch {
		case i == 0:
			assert.Equal(t, "assistant", c.Choices[0].Delta.Role)
		case i <= 4:
			require.NotNil(t, c.Choices[0].Delta.Content)
			text.WriteString(*c.Choices[0].Delta.Content)
			assert.Nil(t, c.Choices[0].FinishReason)
		case i == 5:
			require.NotNil(t, c.Choices[0].FinishReason)
			assert.Equal(t, "length", *c.Choices[0].FinishReason)
			assert.Nil(t, c.Usage)
		case i == 6:
			assert.Empty(t, c.Choices)
			require.NotNil(t, c.Usage)
			assert.Equal(t, 71, c.Usage.PromptTokens)
			assert.Equal(t, 68, c.Usage.PromptTokensDetails.CachedTokens)
			assert.Equal(t, 4, c.Usage.CompletionTokens)
		}
	}
	assert.Equal(t, "[fakevllm simulator] simulated tokens from", text.String())
	assert.Equal(t, uint64(5), srv.Stats().CompletionTokens)
}

func TestStreamingFlushesPerChunk(t *testing.T) {
	// The decode sleep of token 2 blocks until the client has read token 1's chunk: only
	// possible if every chunk is flushed as it is produced.
	read := make(chan struct{})
	var calls int
	var mu sync.Mutex
	sleep := func(ctx context.Context, _ time.Duration) error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 3 { // 1 = prefill, 2 = token 0, 3 = token 1
			select {
			case <-read:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	_, ts := start(t, fakevllm.Config{}, fakevllm.WithSleep(sleep))
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		if sc.Text() == "" {
			continue
		}
		lines = append(lines, sc.Text())
		if len(lines) == 2 { // role chunk + token 0 chunk arrived while token 1 is held
			close(read)
		}
	}
	require.NoError(t, sc.Err())
	assert.Len(t, lines, 5) // role, 2 tokens, finish, [DONE]
	assert.Equal(t, "data: [DONE]", lines[len(lines)-1])
}

func TestMetricsEndpoint(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{ID: "b1", BlockTokens: 4}, noSleep)
	m := msgs("system", strings.Repeat("a", 200), "user", "hi")
	chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 2})
	chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 2})

	require.NoError(t, testutil.GatherAndCompare(srv.Registry(), strings.NewReader(`
# HELP vllm:prefix_cache_hits_total [fakevllm simulator, not vLLM] Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{backend="b1",model_name="fake-model"} 68
# HELP vllm:prefix_cache_queries_total [fakevllm simulator, not vLLM] Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{backend="b1",model_name="fake-model"} 142
# HELP vllm:generation_tokens_total [fakevllm simulator, not vLLM] Number of generation tokens processed (simulated).
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{backend="b1",model_name="fake-model"} 4
`), "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:generation_tokens_total"))

	resp, err := http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	text := string(raw)
	for _, want := range []string{
		`vllm:prefix_cache_queries_total{backend="b1",model_name="fake-model"} 142`,
		`vllm:prefix_cache_hits_total{backend="b1",model_name="fake-model"} 68`,
		`vllm:num_requests_running{backend="b1",model_name="fake-model"} 0`,
		`vllm:num_requests_waiting{backend="b1",model_name="fake-model"} 0`,
		`fakevllm_simulator_info{backend="b1",model_name="fake-model"} 1`,
		`fakevllm simulator`,
	} {
		assert.Contains(t, text, want)
	}
}

func TestHealthAndModels(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{Model: "m1"}, noSleep)
	get := func(path string) (int, string) {
		resp, err := http.Get(ts.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "simulator", resp.Header.Get("X-Fakevllm"))
		return resp.StatusCode, string(raw)
	}
	code, _ := get("/health")
	assert.Equal(t, http.StatusOK, code)
	srv.SetHealthy(false)
	assert.False(t, srv.Healthy())
	code, body := get("/health")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, `"code":"unhealthy"`)
	srv.SetHealthy(true)
	code, _ = get("/health")
	assert.Equal(t, http.StatusOK, code)

	code, body = get("/v1/models")
	require.Equal(t, http.StatusOK, code)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	assert.Equal(t, "list", list.Object)
	require.Len(t, list.Data, 1)
	assert.Equal(t, "m1", list.Data[0].ID)
	assert.Equal(t, "fakevllm-simulator", list.Data[0].OwnedBy)
}

func TestBadRequests(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{}, noSleep)
	huge := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", fakevllm.MaxRequestBodyBytes) + `"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"malformed JSON", http.MethodPost, "/v1/chat/completions", `{"messages":`, 400, "invalid_json"},
		{"not an object", http.MethodPost, "/v1/chat/completions", `[1,2]`, 400, "invalid_json"},
		{"no messages", http.MethodPost, "/v1/chat/completions", `{"model":"m"}`, 400, "invalid_messages"},
		{"empty messages", http.MethodPost, "/v1/chat/completions", `{"messages":[]}`, 400, "invalid_messages"},
		{"missing role", http.MethodPost, "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "invalid_messages"},
		{"bad content", http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":{}}]}`, 400, "invalid_json"},
		{"max_tokens 0", http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "invalid_value"},
		{"max_tokens huge", http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":100000}`, 400, "invalid_value"},
		{"wrong method", http.MethodGet, "/v1/chat/completions", ``, 405, "method_not_allowed"},
		{"post to models", http.MethodPost, "/v1/models", `{}`, 405, "method_not_allowed"},
		{"body too large", http.MethodPost, "/v1/chat/completions", huge, 413, "request_too_large"},
		{"unknown path", http.MethodGet, "/v1/embeddings", ``, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.status, resp.StatusCode, "body %s", raw)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.Equal(t, "simulator", resp.Header.Get("X-Fakevllm"))
			var e apiError
			require.NoError(t, json.Unmarshal(raw, &e), "body %s", raw)
			assert.Equal(t, tc.code, e.Error.Code)
			assert.Equal(t, "invalid_request_error", e.Error.Type)
			assert.Contains(t, e.Error.Message, "fakevllm simulator")
			if tc.status == 405 {
				assert.NotEmpty(t, resp.Header.Get("Allow"))
			}
		})
	}
	assert.Zero(t, srv.Stats().Requests)
	assert.Equal(t, uint64(12), srv.Stats().Rejected)
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []fakevllm.Config{
		{BlockTokens: -1}, {CacheBlocks: -1}, {PrefillPerToken: -1}, {DecodePerToken: -1},
		{MaxConcurrent: -1}, {TimeScale: -0.5}, {DefaultMaxTokens: -1}, {DefaultMaxTokens: fakevllm.MaxOutputTokens + 1},
	} {
		_, err := fakevllm.New(cfg)
		assert.True(t, errors.Is(err, fakevllm.ErrInvalidConfig), "%+v: %v", cfg, err)
	}
	srv, err := fakevllm.New(fakevllm.Config{})
	require.NoError(t, err)
	assert.Equal(t, fakevllm.Config{
		ID: "fakevllm", Model: "fake-model", BlockTokens: 16, CacheBlocks: 4096, PrefillPerToken: time.Millisecond,
		DecodePerToken: 20 * time.Millisecond, MaxConcurrent: 4, TimeScale: 1, DefaultMaxTokens: 64,
	}, srv.Config())
}

func TestTimeScaleAppliedToSleeps(t *testing.T) {
	var mu sync.Mutex
	var got []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
		return nil
	}
	_, ts := start(t, fakevllm.Config{BlockTokens: 4, TimeScale: 0.5, PrefillPerToken: 2 * time.Millisecond, DecodePerToken: 10 * time.Millisecond},
		fakevllm.WithSleep(sleep))
	m := msgs("system", strings.Repeat("a", 200), "user", "hi") // 71 tokens
	chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 3})
	chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 3}) // 68 cached -> 3 uncached
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []time.Duration{
		71 * time.Millisecond, 15 * time.Millisecond, // cold prefill 71*2ms*0.5, decode 3*10ms*0.5
		3 * time.Millisecond, 15 * time.Millisecond, // warm prefill 3*2ms*0.5
	}, got)
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
