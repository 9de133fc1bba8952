package main

import (
	"fmt"
	"io"
	"math"
	"time"
)

// WriteTable prints the results as a Markdown table.
func WriteTable(w io.Writer, p Params, results []Result) error {
	_, err := fmt.Fprintf(w, "| condition | requests | affinity hit rate (gateway /metrics) | p50 | p95 | p99 | mean cold turn | mean warm turn | cold/warm | backend prefix-cache hit rate |\n"+
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	if err != nil {
		return err
	}
	for _, r := range results {
		cold, warm := mean(r.Cold), mean(r.Warm)
		_, err := fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Condition, r.Requests, pct(r.HitRate()),
			ms(percentile(r.Latencies, 0.50)), ms(percentile(r.Latencies, 0.95)), ms(percentile(r.Latencies, 0.99)),
			msN(cold, len(r.Cold)), msN(warm, len(r.Warm)), times(cold, warm, len(r.Cold), len(r.Warm)),
			pct(r.CacheHitRate()))
		if err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "\nSimulated backends (fakevllm, %d of them): prefill %v per uncached prompt token, decode %v per output token, "+
		"%d running sequences each, all times x%g (-time-scale); %d-byte system prompt per session, %d output tokens per turn, concurrency %d. "+
		"Latencies are end-to-end wall-clock times at the OpenAI client. A turn is cold when the gateway reported an affinity miss "+
		"(X-Agent-Serve-Affinity-Hit: false), warm on a hit.\n",
		p.Backends, prefillPerToken, decodePerToken, maxConcurrent, p.TimeScale, p.PromptBytes, p.MaxTokens, p.Concurrency)
	if err != nil {
		return err
	}
	if p.Skewed {
		_, err = fmt.Fprintf(w, "Skewed scenario: every fourth session has a %d-byte system prompt (10x), %d sessions x %d turns at concurrency %d; "+
			"sticky = affinity without load awareness, load-aware = the gateway's affinity.load block (examples/configs/gateway.yaml), "+
			"lease-sum view = the same without its drain-model and cold-cache keys, OFF = fresh single-turn sessions.\n",
			10*p.PromptBytes, p.SkewSessions, p.Turns, p.SkewConcurrency)
		if err != nil {
			return err
		}
	}
	if p.NoPromptTokensDetails {
		_, err = fmt.Fprintln(w, "Backends sent no prompt_tokens_details (-no-prompt-tokens-details, vLLM's default): the gateway learned no cached tokens.")
		return err
	}
	for _, r := range results {
		if r.ColdByCache != len(r.Cold) {
			_, err = fmt.Fprintf(w, "Note: %s: %d turns were affinity misses but %d had cached_tokens below the system prompt size.\n",
				r.Condition, len(r.Cold), r.ColdByCache)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func pct(f float64) string {
	if math.IsNaN(f) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f %%", 100*f)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func msN(d time.Duration, n int) string {
	if n == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s (n=%d)", ms(d), n)
}

func times(cold, warm time.Duration, nc, nw int) string {
	if nc == 0 || nw == 0 || warm <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1fx", float64(cold)/float64(warm))
}
