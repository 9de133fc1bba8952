package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// runSession sends the turns of session s one after another; every turn resends the
// system prompt and the whole history plus a new user message.
func runSession(ctx context.Context, client openai.Client, p Params, cond Condition, salt uint64, s int, done func()) ([]sample, error) {
	rng := rand.New(rand.NewPCG(p.Seed, salt<<32|uint64(s)))
	sessionID := fmt.Sprintf("study-%d-%d-%d-%016x", p.Seed, salt, s, rng.Uint64())
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(systemPrompt(rng, sessionID, promptBytes(p, cond, s)))}
	var out []sample
	for t := range cond.Turns {
		msgs = append(msgs, openai.UserMessage(userMessage(rng, t)))
		var httpResp *http.Response
		start := time.Now()
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     modelName,
			Messages:  msgs,
			MaxTokens: openai.Int(int64(p.MaxTokens)),
		}, option.WithHeader("X-Session-ID", sessionID), option.WithResponseInto(&httpResp))
		lat := time.Since(start)
		if err != nil {
			return out, fmt.Errorf("session %d turn %d: %w", s, t+1, err)
		}
		if len(resp.Choices) == 0 {
			return out, fmt.Errorf("session %d turn %d: no choices in response", s, t+1)
		}
		hit, err := strconv.ParseBool(httpResp.Header.Get(gateway.HeaderAffinityHit))
		if err != nil {
			return out, fmt.Errorf("session %d turn %d: header %s: %w", s, t+1, gateway.HeaderAffinityHit, err)
		}
		out = append(out, sample{latency: lat, hit: hit, cached: resp.Usage.PromptTokensDetails.CachedTokens})
		msgs = append(msgs, openai.AssistantMessage(resp.Choices[0].Message.Content))
		done()
	}
	return out, nil
}

// promptBytes is session s's system prompt size: 10x PromptBytes for every fourth session
// of a skewed condition.
func promptBytes(p Params, cond Condition, s int) int {
	if cond.Skewed && s%4 == 0 {
		return 10 * p.PromptBytes
	}
	return p.PromptBytes
}

var words = strings.Fields(`the a repository function test build module file error config request
response backend session cache prefix token gateway handler server client context value index
table binding tier weight health metric latency stream chunk buffer header body parse check
update refactor implement review deploy rollback branch commit diff patch lint vet race`)

// systemPrompt is an agent-style system prompt of exactly n bytes. It starts with the
// session's own environment block (as agent harnesses do), so sessions share no
// prefix-cache block and a backend can only reuse a session's cache for that session.
func systemPrompt(rng *rand.Rand, sessionID string, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	fmt.Fprintf(&b, "<env>session %s; cwd /home/agent/project-%08x</env>\nYou are a coding agent. Tools and rules:\n", sessionID, rng.Uint32())
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

func userMessage(rng *rand.Rand, turn int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Turn %d: ", turn+1)
	for b.Len() < 160 {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}
