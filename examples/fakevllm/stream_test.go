package fakevllm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

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
