package fakevllm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

// A second turn that resends the same system prompt finds it in the prefix cache.
func Example() {
	srv, err := fakevllm.New(fakevllm.Config{ID: "b1"},
		// Skip the simulated waiting (a demo; real runs use TimeScale instead).
		fakevllm.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }))
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	system := strings.Repeat("You are a careful coding agent. ", 100) // ~3 KB
	for turn := 1; turn <= 2; turn++ {
		body := fmt.Sprintf(`{"model":"fake-model","max_tokens":8,"messages":[{"role":"system","content":%q},{"role":"user","content":"turn %d"}]}`, system, turn)
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		var out struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil {
			panic(err)
		}
		fmt.Printf("turn %d [%s]: prompt %d tokens, cached %d\n", turn, resp.Header.Get("X-Fakevllm"),
			out.Usage.PromptTokens, out.Usage.PromptTokensDetails.CachedTokens)
		if turn == 1 {
			fmt.Println(out.Choices[0].Message.Content)
		}
	}
	st := srv.Stats()
	fmt.Printf("prefix cache: %d of %d tokens hit\n", st.CachedTokens, st.QueriedTokens)
	// Output:
	// turn 1 [simulator]: prompt 822 tokens, cached 0
	// [fakevllm simulator] simulated tokens from a fake vLLM backend
	// turn 2 [simulator]: prompt 822 tokens, cached 800
	// prefix cache: 800 of 1644 tokens hit
}
