package fakevllm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *usage        `json:"usage,omitempty"`
}

func (s *Server) streamDecode(ctx context.Context, w http.ResponseWriter, j *job, includeUsage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	chunk := chatChunk{ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: j.model, SystemFingerprint: "fakevllm-simulator"}
	send := func(c chunkChoice, u *usage) error {
		chunk.Choices = chunk.Choices[:0]
		if u == nil {
			chunk.Choices = append(chunk.Choices, c)
		}
		chunk.Usage = u
		b, err := json.Marshal(chunk)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	empty := ""
	if err := send(chunkChoice{Delta: chunkDelta{Role: "assistant", Content: &empty}}, nil); err != nil {
		s.cancelled.Add(1)
		return
	}
	step := s.scale(1, s.cfg.DecodePerToken)
	for i := range j.outTokens {
		if err := s.sleep(ctx, step); err != nil {
			s.cancelled.Add(1)
			return
		}
		piece := tokenText(i)
		s.completionTokens.Add(1)
		if err := send(chunkChoice{Delta: chunkDelta{Content: &piece}}, nil); err != nil {
			s.cancelled.Add(1)
			return
		}
	}
	finish := j.finish
	if err := send(chunkChoice{Delta: chunkDelta{}, FinishReason: &finish}, nil); err != nil {
		s.cancelled.Add(1)
		return
	}
	if includeUsage {
		u := s.usage(j)
		if err := send(chunkChoice{}, &u); err != nil {
			s.cancelled.Add(1)
			return
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		s.cancelled.Add(1)
		return
	}
	_ = rc.Flush()
	s.completed.Add(1)
}

// tokenText is the text of output token i: the simulator marker first, then filler words.
func tokenText(i int) string {
	if i == 0 {
		return SimulatorMarker
	}
	words := [...]string{" simulated", " tokens", " from", " a", " fake", " vLLM", " backend", " only"}
	return words[(i-1)%len(words)]
}

// completionText is the full text of n output tokens (what streaming sends piecewise).
func completionText(n int) string {
	var b []byte
	for i := range n {
		b = append(b, tokenText(i)...)
	}
	return string(b)
}
