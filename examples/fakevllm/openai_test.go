package fakevllm_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

// The official OpenAI Go client talks to the simulator unchanged, streaming or not.
func TestOpenAIClientCompatibility(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{BlockTokens: 4}, noSleep)
	client := openai.NewClient(
		option.WithBaseURL(ts.URL+"/v1/"),
		option.WithAPIKey("unused"),
		option.WithHTTPClient(ts.Client()),
		option.WithMaxRetries(0),
	)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: "fake-model",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(strings.Repeat("a", 200)),
			openai.UserMessage("hi"),
		},
		MaxTokens: openai.Int(3),
	}

	t.Run("non-streaming", func(t *testing.T) {
		var raw *http.Response
		cold, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&raw))
		require.NoError(t, err)
		assert.Equal(t, "simulator", raw.Header.Get("X-Fakevllm"))
		assert.Equal(t, "chat.completion", string(cold.Object))
		require.Len(t, cold.Choices, 1)
		assert.True(t, strings.HasPrefix(cold.Choices[0].Message.Content, fakevllm.SimulatorMarker))
		assert.Equal(t, int64(71), cold.Usage.PromptTokens)
		assert.Equal(t, int64(0), cold.Usage.PromptTokensDetails.CachedTokens)

		warm, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err)
		assert.Equal(t, int64(68), warm.Usage.PromptTokensDetails.CachedTokens)
		assert.Equal(t, int64(3), warm.Usage.CompletionTokens)
		assert.Equal(t, int64(74), warm.Usage.TotalTokens)
	})

	t.Run("streaming", func(t *testing.T) {
		sp := params
		sp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, sp)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			chunk := stream.Current()
			assert.Equal(t, "chat.completion.chunk", string(chunk.Object))
			require.True(t, acc.AddChunk(chunk))
			chunks++
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		assert.Equal(t, 6, chunks) // role, 3 tokens, finish, usage
		require.Len(t, acc.Choices, 1)
		assert.Equal(t, "[fakevllm simulator] simulated tokens", acc.Choices[0].Message.Content)
		assert.Equal(t, "length", acc.Choices[0].FinishReason)
		assert.Equal(t, int64(68), acc.Usage.PromptTokensDetails.CachedTokens)
		assert.Equal(t, int64(3), acc.Usage.CompletionTokens)
	})

	t.Run("error", func(t *testing.T) {
		bad := params
		bad.MaxTokens = openai.Int(fakevllm.MaxOutputTokens + 1)
		_, err := client.Chat.Completions.New(ctx, bad)
		var apiErr *openai.Error
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
		assert.Equal(t, "invalid_value", apiErr.Code)
	})
	// A stream counts as completed when its handler has written its end, which may come
	// just after the client read [DONE] and returned (CI saw 2 once): wait for it, bounded.
	require.Eventually(t, func() bool { return srv.Stats().Completed == 3 }, 10*time.Second, time.Millisecond,
		"completed: %d", srv.Stats().Completed)
}
