package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// The cached-decode scenario (-cached): many streaming sessions whose turns after the
// first are fully cached, so each hit is charged about 1 prompt token however long it
// decodes, on backends with few running slots. It reproduces tester19's finding that a
// backend queueing many cached decodes looks idle to the load view, and measures
// load.min_request_cost against it. Every worker drives one session at a time: Turns
// turns resending the same conversation (the prefix is cached after the first), then a
// new session, so new sessions keep being placed while the cached ones decode. It runs
// for a fixed duration and reports the requests served and the gateway's outstanding
// requests per backend (MetricOutstandingRequests, sampled every 100 ms).

// CachedParams are the cached-decode scenario's knobs.
type CachedParams struct {
	Sessions  int           // streaming sessions driven at once
	Turns     int           // turns per session before a worker starts a new one
	MaxTokens int           // output tokens per turn (streamed)
	Duration  time.Duration // wall-clock time each condition runs
	MinCosts  []int64       // load.min_request_cost values measured with the load block
}

// DefaultCachedParams: 24 sessions of 4 turns streaming 64 tokens each, 10 s per
// condition, min_request_cost 256, 1024 and 4096.
func DefaultCachedParams() CachedParams {
	return CachedParams{Sessions: 24, Turns: 4, MaxTokens: 64, Duration: 10 * time.Second, MinCosts: []int64{256, 1024, 4096}}
}

// CachedResult is one condition's outcome.
type CachedResult struct {
	Condition   string
	Served      int       // turns completed within the duration
	Outstanding []float64 // mean outstanding requests per backend, largest first
}

// cachedConditions: no load block, the load block of examples/configs/gateway.yaml
// (-skew-* flags) without min_request_cost, and that block with each min_request_cost.
func cachedConditions(p Params, cp CachedParams) []Condition {
	load := p.SkewLoad
	load.MinRequestCost = 0
	conds := []Condition{
		{Name: "no load block (stickiness)"},
		{Name: "load block without min_request_cost (" + loadName(load) + ")", Load: &load},
	}
	for _, m := range cp.MinCosts {
		l := load
		l.MinRequestCost = m
		conds = append(conds, Condition{Name: fmt.Sprintf("load block + min_request_cost %d", m), Load: &l})
	}
	return conds
}

// RunCached runs the cached-decode scenario's conditions, each on a fresh cluster.
func RunCached(ctx context.Context, p Params, cp CachedParams) ([]CachedResult, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if cp.Sessions < 1 || cp.Turns < 1 || cp.MaxTokens < 1 || cp.Duration <= 0 {
		return nil, errors.New("cached scenario: sessions, turns, max tokens and duration must be positive")
	}
	var out []CachedResult
	for i, c := range cachedConditions(p, cp) {
		if c.Load != nil {
			if err := c.Load.Validate(); err != nil {
				return out, err
			}
		}
		r, err := runCachedCondition(ctx, p, cp, c, uint64(i))
		if err != nil {
			return out, fmt.Errorf("%s: %w", c.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func runCachedCondition(ctx context.Context, p Params, cp CachedParams, cond Condition, salt uint64) (CachedResult, error) {
	cl, err := startCluster(p, cond)
	if err != nil {
		return CachedResult{}, err
	}
	defer cl.stop()
	transport := &http.Transport{MaxIdleConnsPerHost: cp.Sessions * 2}
	defer transport.CloseIdleConnections()
	client := openai.NewClient(
		option.WithBaseURL(cl.gwURL+"/v1/"),
		option.WithAPIKey("loadstudy"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: transport}),
	)
	run, cancel := context.WithTimeout(ctx, cp.Duration)
	defer cancel()
	var (
		served atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
	)
	for w := range cp.Sessions {
		wg.Go(func() {
			for s := 0; run.Err() == nil; s++ {
				if err := cachedSession(run, client, p, cp, salt, w, s, &served); err != nil && run.Err() == nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
				}
			}
		})
	}
	sums := map[string]float64{}
	samples := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
sample:
	for {
		select {
		case <-run.Done():
			break sample
		case <-tick.C:
		}
		m, err := scrape(run, cl.gwURL+"/metrics")
		if err != nil {
			if run.Err() != nil {
				break
			}
			return CachedResult{}, fmt.Errorf("gateway /metrics: %w", err)
		}
		for id, v := range m.byLabel(gateway.MetricOutstandingRequests, "backend") {
			sums[id] += v
		}
		samples++
	}
	wg.Wait()
	if len(errs) > 0 {
		return CachedResult{}, errors.Join(errs...)
	}
	if err := ctx.Err(); err != nil {
		return CachedResult{}, err
	}
	res := CachedResult{Condition: cond.Name, Served: int(served.Load())}
	for i := range p.Backends {
		res.Outstanding = append(res.Outstanding, sums[fmt.Sprintf("vllm-%d", i+1)]/float64(max(samples, 1)))
	}
	slices.SortFunc(res.Outstanding, func(a, b float64) int { return int(sign(b - a)) })
	return res, nil
}

func sign(x float64) float64 {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

// cachedSession drives worker w's session s: Turns streaming turns of the same
// conversation, so every turn after the first finds its whole prefix cached (but the
// last partial block). A turn counts as served when its stream ended normally.
func cachedSession(ctx context.Context, client openai.Client, p Params, cp CachedParams, salt uint64, w, s int, served *atomic.Int64) error {
	rng := rand.New(rand.NewPCG(p.Seed, salt<<48|uint64(w)<<24|uint64(s)))
	sessionID := fmt.Sprintf("cached-%d-%d-%d-%d-%016x", p.Seed, salt, w, s, rng.Uint64())
	params := openai.ChatCompletionNewParams{
		Model: modelName,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(systemPrompt(rng, sessionID, p.PromptBytes)),
			openai.UserMessage(userMessage(rng, 0)),
		},
		MaxTokens:     openai.Int(int64(cp.MaxTokens)),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for t := range cp.Turns {
		stream := client.Chat.Completions.NewStreaming(ctx, params, option.WithHeader("X-Session-ID", sessionID))
		for stream.Next() {
		}
		err := stream.Err()
		_ = stream.Close()
		if err != nil {
			return fmt.Errorf("session %d/%d turn %d: %w", w, s, t+1, err)
		}
		served.Add(1)
	}
	return nil
}

// byLabel returns a gauge or counter family's values by the value of one label.
func (f families) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	mf, ok := f[name]
	if !ok {
		return out
	}
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out[lp.GetValue()] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// WriteCachedTable prints the cached-decode scenario's results as a Markdown table.
func WriteCachedTable(w io.Writer, p Params, cp CachedParams, results []CachedResult) error {
	if _, err := fmt.Fprintf(w, "| condition | requests served in %v | mean outstanding requests per backend (largest first) | spread (max - min) |\n|---|---:|---|---:|\n", cp.Duration); err != nil {
		return err
	}
	for _, r := range results {
		parts := make([]string, len(r.Outstanding))
		for i, v := range r.Outstanding {
			parts[i] = fmt.Sprintf("%.1f", v)
		}
		spread := 0.0
		if n := len(r.Outstanding); n > 0 {
			spread = r.Outstanding[0] - r.Outstanding[n-1]
		}
		if _, err := fmt.Fprintf(w, "| %s | %d | %s | %.1f |\n", r.Condition, r.Served, strings.Join(parts, " / "), spread); err != nil {
			return err
		}
	}
	base := p.SkewLoad
	base.MinRequestCost = 0
	_, err := fmt.Fprintf(w, "\nCached-decode scenario: %d fakevllm backends (%d running sequences each, decode %v per output token x%g), "+
		"%d streaming sessions at once, each %d turns of the same conversation (%d-byte system prompt; turns after the first are fully cached) "+
		"streaming %d tokens, then a new session. Load block: examples/configs/gateway.yaml's (%s), min_request_cost as the row says.\n",
		p.Backends, maxConcurrent, decodePerToken, p.TimeScale, cp.Sessions, cp.Turns, p.PromptBytes, cp.MaxTokens, loadName(base))
	return err
}

// parseMinCosts parses a comma-separated list of min_request_cost values.
func parseMinCosts(s string) ([]int64, error) {
	var out []int64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 1 || v > affinity.MaxLeaseCost {
			return nil, fmt.Errorf("-cached-min-costs: %q is not a min_request_cost in [1, %d]", f, affinity.MaxLeaseCost)
		}
		out = append(out, v)
	}
	return out, nil
}
