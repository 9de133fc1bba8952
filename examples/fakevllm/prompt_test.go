package fakevllm_test

import (
	"encoding/json"
	"strings"
	"testing"

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
