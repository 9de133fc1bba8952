package fakevllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// BytesPerToken is the token estimation rule: one token per 4 bytes of the chat-templated
// prompt, rounded up (see [EstimateTokens]). Real tokenizers average roughly 4 bytes per
// token on English text and code; the simulator does not tokenize.
const BytesPerToken = 4

// Message is one chat message of a request, as far as the simulator needs it.
//
// Content accepts the OpenAI forms: a string, null, or an array of content parts whose
// "text" fields are concatenated in order (other part types, e.g. images, contribute
// nothing). ToolCalls keeps an assistant message's "tool_calls" as raw JSON so repeated
// history renders identically.
type Message struct {
	Role       string          `json:"role"`                   // required, any non-empty value
	Name       string          `json:"name,omitempty"`         // optional participant name
	Content    string          `json:"content"`                // text ("" for null)
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`   // raw JSON; nil if absent or null
	ToolCallID string          `json:"tool_call_id,omitempty"` // the call a tool message answers
}

// UnmarshalJSON decodes a message, accepting string, null or content-part-array content.
// Any other content (a number, an object, a malformed part array) is an error.
func (m *Message) UnmarshalJSON(data []byte) error {
	var raw struct {
		Role       string          `json:"role"`
		Name       string          `json:"name"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  json.RawMessage `json:"tool_calls"`
		ToolCallID string          `json:"tool_call_id"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	content, err := decodeContent(raw.Content)
	if err != nil {
		return err
	}
	*m = Message{Role: raw.Role, Name: raw.Name, Content: content, ToolCallID: raw.ToolCallID}
	if len(raw.ToolCalls) > 0 && !bytes.Equal(raw.ToolCalls, []byte("null")) {
		m.ToolCalls = raw.ToolCalls
	}
	return nil
}

var errContent = errors.New("content must be a string, null or an array of content parts")

func decodeContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", errContent
		}
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String(), nil
	}
	return "", errContent
}

// RenderPrompt renders a request into the prompt text the prefix cache and the token rule
// work on. The template is a ChatML-like format, documented here so tests and callers can
// predict token counts exactly:
//
//	if tools is non-empty:  "<|im_start|>tools\n" + compact(tools) + "<|im_end|>\n"
//	for each message:       "<|im_start|>" + role [+ " name=" + name] [+ " tool_call_id=" + id] + "\n"
//	                        + content [+ "\n<tool_calls>" + compact(tool_calls)] + "<|im_end|>\n"
//	finally:                "<|im_start|>assistant\n"
//
// compact is encoding/json.Compact; raw JSON that fails to compact is used as is. Cost:
// O(prompt bytes); usually one allocation for the result, plus a scratch buffer for each
// compacted tools or tool_calls value (and a regrowth when names and tool call IDs are
// long). Safe for concurrent use.
func RenderPrompt(tools json.RawMessage, messages []Message) string {
	var b strings.Builder
	n := 32
	for i := range messages {
		n += len(messages[i].Content) + len(messages[i].ToolCalls) + len(messages[i].Role) + 32
	}
	b.Grow(n + len(tools))
	if t := bytes.TrimSpace(tools); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		b.WriteString("<|im_start|>tools\n")
		writeCompact(&b, t)
		b.WriteString("<|im_end|>\n")
	}
	for _, m := range messages {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		if m.Name != "" {
			b.WriteString(" name=")
			b.WriteString(m.Name)
		}
		if m.ToolCallID != "" {
			b.WriteString(" tool_call_id=")
			b.WriteString(m.ToolCallID)
		}
		b.WriteString("\n")
		b.WriteString(m.Content)
		if len(m.ToolCalls) > 0 {
			b.WriteString("\n<tool_calls>")
			writeCompact(&b, m.ToolCalls)
		}
		b.WriteString("<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}

func writeCompact(b *strings.Builder, raw []byte) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		b.Write(raw)
		return
	}
	b.Write(buf.Bytes())
}

// EstimateTokens returns the simulated token count of a rendered prompt:
// ceil(len(prompt) / [BytesPerToken]) (bytes, not runes). The empty prompt has 0 tokens.
func EstimateTokens(prompt string) int {
	return (len(prompt) + BytesPerToken - 1) / BytesPerToken
}

// validateMessages checks the fields the simulator relies on.
func validateMessages(messages []Message) error {
	if len(messages) == 0 {
		return errors.New("messages must be a non-empty array")
	}
	for i, m := range messages {
		if m.Role == "" {
			return fmt.Errorf("messages[%d].role is required", i)
		}
	}
	return nil
}
