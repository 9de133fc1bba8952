package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/schollz/progressbar/v3"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/fakevllm"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Params are the study's knobs (the command-line flags).
type Params struct {
	Backends    int     // fakevllm backends behind the gateway
	Concurrency int     // sessions driven at once (a session's turns are sequential)
	Sessions    int     // condition ON: sticky sessions
	Turns       int     // condition ON: turns per session
	OffSessions int     // condition OFF: single-turn sessions with fresh IDs (0 -> Sessions*Turns)
	PromptBytes int     // bytes of each session's system prompt
	MaxTokens   int     // output tokens per answer
	TimeScale   float64 // fakevllm TimeScale: multiplies every simulated duration
	Seed        uint64  // seeds the generated prompts and session IDs

	// Skewed adds the skewed scenario: every fourth session's system prompt is 10x
	// PromptBytes, SkewSessions sessions x Turns run SkewConcurrency at a time, under
	// these policies: sticky (affinity, no load awareness), load-aware (the gateway's
	// affinity.Config.Load = SkewLoad, by default RecommendedLoad), load-aware with the
	// lease-sum view (SkewLoad without its drain-model and cold-cache keys; only when
	// SkewLoad sets one of them) and affinity off.
	Skewed          bool
	SkewSessions    int
	SkewConcurrency int
	SkewLoad        affinity.LoadConfig

	// Progress receives the progress bar; nil shows none.
	Progress io.Writer
	// Sleep, when set, replaces the simulators' sleep (tests inject a no-op).
	Sleep func(ctx context.Context, d time.Duration) error
}

// DefaultParams reproduce the reference study of DESIGN.md: 3 backends, concurrency 6,
// a 3 KB system prompt, 12 sessions x 6 turns vs 72 single-turn sessions.
func DefaultParams() Params {
	return Params{
		Backends:    3,
		Concurrency: 6,
		Sessions:    12,
		Turns:       6,
		PromptBytes: 3072,
		MaxTokens:   12,
		TimeScale:   0.5,
		Seed:        1,

		SkewSessions:    24,
		SkewConcurrency: 12,
		SkewLoad:        RecommendedLoad(),
	}
}

// RecommendedLoad is the load block of examples/configs/gateway.yaml (the project's
// recommended drain-model settings), the skewed scenario's default: balance_factor 1.25,
// spill_cost_weight 5, cold_cache_ratio 0.001, drain_tokens_per_second 16000,
// retention_guard_factor 2.5.
func RecommendedLoad() affinity.LoadConfig {
	return affinity.LoadConfig{
		BalanceFactor:        1.25,
		SpillCostWeight:      affinity.SpillWeight(5),
		ColdCacheRatio:       0.001,
		DrainTokensPerSecond: 16000,
		RetentionGuardFactor: 2.5,
	}
}

// Simulated backend costs (before TimeScale): fakevllm's defaults, 1 ms per uncached
// prompt token and 20 ms per output token, 4 running sequences per backend.
const (
	prefillPerToken = time.Millisecond
	decodePerToken  = 20 * time.Millisecond
	maxConcurrent   = 4
	modelName       = "fake-model"
)

func (p Params) validate() error {
	switch {
	case p.Backends < 1:
		return fmt.Errorf("-backends %d: need at least 1", p.Backends)
	case p.Concurrency < 1:
		return fmt.Errorf("-concurrency %d: need at least 1", p.Concurrency)
	case p.Sessions < 1:
		return fmt.Errorf("-sessions %d: need at least 1", p.Sessions)
	case p.Turns < 1:
		return fmt.Errorf("-turns %d: need at least 1", p.Turns)
	case p.OffSessions < 0:
		return fmt.Errorf("-off-sessions %d: must be >= 0", p.OffSessions)
	case p.PromptBytes < 64:
		return fmt.Errorf("-prompt-bytes %d: need at least 64", p.PromptBytes)
	case p.MaxTokens < 1:
		return fmt.Errorf("-max-tokens %d: need at least 1", p.MaxTokens)
	case !(p.TimeScale > 0) || math.IsInf(p.TimeScale, 0):
		return fmt.Errorf("-time-scale %v: must be > 0", p.TimeScale)
	case p.Skewed && (p.SkewSessions < 1 || p.SkewConcurrency < 1):
		return fmt.Errorf("-skew-sessions %d, -skew-concurrency %d: need at least 1", p.SkewSessions, p.SkewConcurrency)
	case p.Skewed && p.SkewLoad.BalanceFactor == 0:
		return errors.New("skewed scenario: SkewLoad.BalanceFactor must turn load awareness on")
	}
	if p.Skewed {
		if err := p.SkewLoad.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Condition is one arm of the study.
type Condition struct {
	Name        string
	Sessions    int
	Turns       int
	Concurrency int                  // 0: Params.Concurrency
	Skewed      bool                 // every fourth session has a 10x system prompt
	Load        *affinity.LoadConfig // the gateway's load awareness (nil: off)
}

// Conditions returns ON (sticky sessions) and OFF (fresh single-turn sessions).
func (p Params) Conditions() []Condition {
	off := p.OffSessions
	if off == 0 {
		off = p.Sessions * p.Turns
	}
	conds := []Condition{
		{Name: fmt.Sprintf("affinity ON (%d sessions x %d turns)", p.Sessions, p.Turns), Sessions: p.Sessions, Turns: p.Turns},
		{Name: fmt.Sprintf("affinity OFF (%d single-turn sessions)", off), Sessions: off, Turns: 1},
	}
	if p.Skewed {
		n, c := p.SkewSessions, p.SkewConcurrency
		load := p.SkewLoad
		conds = append(conds,
			Condition{Name: fmt.Sprintf("skewed: sticky (%d sessions x %d turns, c=%d)", n, p.Turns, c),
				Sessions: n, Turns: p.Turns, Concurrency: c, Skewed: true},
			Condition{Name: "skewed: load-aware (" + loadName(load) + ")",
				Sessions: n, Turns: p.Turns, Concurrency: c, Skewed: true, Load: &load})
		if ls := leaseSum(load); ls != load {
			conds = append(conds, Condition{Name: "skewed: load-aware, lease-sum view (" + loadName(ls) + ")",
				Sessions: n, Turns: p.Turns, Concurrency: c, Skewed: true, Load: &ls})
		}
		conds = append(conds,
			Condition{Name: fmt.Sprintf("skewed: affinity OFF (%d single-turn sessions, c=%d)", n*p.Turns, c),
				Sessions: n * p.Turns, Turns: 1, Concurrency: c, Skewed: true})
	}
	return conds
}

// leaseSum returns l without the drain model and the cache-loss keys (cold_cache_ratio,
// drain_tokens_per_second, drain_ewma_weight, retention_guard_factor): the lease-sum
// load view the skewed scenario compares with the recommended settings.
func leaseSum(l affinity.LoadConfig) affinity.LoadConfig {
	return affinity.LoadConfig{BalanceFactor: l.BalanceFactor, SpillCostWeight: l.SpillCostWeight,
		DisableSpill: l.DisableSpill, QueuedRequestCost: l.QueuedRequestCost}
}

// loadName lists the load keys a condition sets, e.g. "balance_factor 1.25,
// spill_cost_weight 5, drain_tokens_per_second 16000".
func loadName(l affinity.LoadConfig) string {
	parts := []string{fmt.Sprintf("balance_factor %g", l.BalanceFactor)}
	if l.SpillCostWeight != nil {
		parts = append(parts, fmt.Sprintf("spill_cost_weight %g", *l.SpillCostWeight))
	}
	for _, kv := range []struct {
		key string
		v   float64
	}{{"cold_cache_ratio", l.ColdCacheRatio}, {"drain_tokens_per_second", l.DrainTokensPerSecond}, {"retention_guard_factor", l.RetentionGuardFactor}} {
		if kv.v != 0 {
			parts = append(parts, fmt.Sprintf("%s %g", kv.key, kv.v))
		}
	}
	return strings.Join(parts, ", ")
}

// Result is the measured outcome of one condition.
type Result struct {
	Condition string
	Requests  int

	// From the gateway's /metrics.
	Hits, Misses float64

	// End-to-end latencies (client side) of every request, and split by the gateway's
	// X-Agent-Serve-Affinity-Hit header: cold = miss, warm = hit.
	Latencies []time.Duration
	Cold      []time.Duration
	Warm      []time.Duration
	// ColdByCache counts requests whose backend reported cached_tokens below the
	// system prompt's size; it equals len(Cold) when the two definitions agree.
	ColdByCache int

	// Summed over the backends' /metrics (tokens).
	CacheQueries, CacheHits float64
}

// HitRate is hits / (hits + misses) from the gateway's metrics; NaN without requests.
func (r Result) HitRate() float64 { return ratio(r.Hits, r.Hits+r.Misses) }

// CacheHitRate is the backends' prefix-cache hit rate in tokens.
func (r Result) CacheHitRate() float64 { return ratio(r.CacheHits, r.CacheQueries) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// Run runs every condition with fresh backends and a fresh gateway each, so no cache or
// binding leaks from one condition into the next.
func Run(ctx context.Context, p Params) ([]Result, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	var out []Result
	for i, c := range p.Conditions() {
		r, err := RunCondition(ctx, p, c, uint64(i))
		if err != nil {
			return out, fmt.Errorf("%s: %w", c.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// cluster is N fakevllm backends and a gateway, all on loopback ephemeral ports.
type cluster struct {
	backends []*fakevllm.Server
	urls     []string
	gwURL    string
	gw       *gateway.Gateway
	stop     func()
}

func startCluster(p Params, cond Condition) (*cluster, error) {
	c := &cluster{}
	var servers []*http.Server
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = func() {
		cancel()
		for _, s := range servers {
			_ = s.Close()
		}
		wg.Wait()
	}
	var opts []fakevllm.Option
	if p.Sleep != nil {
		opts = append(opts, fakevllm.WithSleep(p.Sleep))
	}
	gcfg := gateway.Config{Listen: "127.0.0.1:0"}
	if cond.Load != nil {
		gcfg.Affinity.Load = *cond.Load
	}
	for i := range p.Backends {
		id := fmt.Sprintf("vllm-%d", i+1)
		srv, err := fakevllm.New(fakevllm.Config{
			ID:              id,
			Model:           modelName,
			PrefillPerToken: prefillPerToken,
			DecodePerToken:  decodePerToken,
			MaxConcurrent:   maxConcurrent,
			TimeScale:       p.TimeScale,
		}, opts...)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("fakevllm: %w", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.stop()
			return nil, err
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, hs)
		wg.Go(func() { _ = hs.Serve(ln) })
		u := "http://" + ln.Addr().String()
		c.backends = append(c.backends, srv)
		c.urls = append(c.urls, u)
		gcfg.Backends = append(gcfg.Backends, gateway.BackendConfig{ID: id, URL: u, Weight: 1})
	}
	g, err := gateway.New(gcfg, gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		c.stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.stop()
		return nil, err
	}
	c.gw = g
	c.gwURL = "http://" + ln.Addr().String()
	wg.Go(func() { _ = g.Serve(ctx, ln) })
	return c, nil
}

// sample is one completed request.
type sample struct {
	latency time.Duration
	hit     bool
	cached  int64
}

// RunCondition starts a fresh cluster, drives cond through it and reads the metrics back.
// salt separates the session IDs and prompts of different conditions.
func RunCondition(ctx context.Context, p Params, cond Condition, salt uint64) (Result, error) {
	if err := p.validate(); err != nil {
		return Result{}, err
	}
	cl, err := startCluster(p, cond)
	if err != nil {
		return Result{}, err
	}
	defer cl.stop()

	conc := cmp.Or(cond.Concurrency, p.Concurrency)
	transport := &http.Transport{MaxIdleConnsPerHost: conc * 2}
	defer transport.CloseIdleConnections()
	client := openai.NewClient(
		option.WithBaseURL(cl.gwURL+"/v1/"),
		option.WithAPIKey("loadstudy"),
		option.WithMaxRetries(0), // a lost request must fail the study, not be hidden
		option.WithHTTPClient(&http.Client{Transport: transport}),
	)

	total := cond.Sessions * cond.Turns
	bar := newBar(p.Progress, total, cond.Name)
	defer func() { _ = bar.Finish() }()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	var (
		mu      sync.Mutex
		samples []sample
		errs    []error
		wg      sync.WaitGroup
	)
	promptTokens := int64(p.PromptBytes / fakevllm.BytesPerToken) // of the small sessions
	for range conc {
		wg.Go(func() {
			for s := range jobs {
				got, err := runSession(ctx, client, p, cond, salt, s, func() { _ = bar.Add(1) })
				mu.Lock()
				samples = append(samples, got...)
				if err != nil {
					errs = append(errs, err)
					cancel()
				}
				mu.Unlock()
			}
		})
	}
feed:
	for s := range cond.Sessions {
		select {
		case jobs <- s:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if len(errs) > 0 {
		return Result{}, errors.Join(errs...)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}

	res := Result{Condition: cond.Name, Requests: len(samples)}
	for _, s := range samples {
		res.Latencies = append(res.Latencies, s.latency)
		if s.hit {
			res.Warm = append(res.Warm, s.latency)
		} else {
			res.Cold = append(res.Cold, s.latency)
		}
		if s.cached < promptTokens {
			res.ColdByCache++
		}
	}
	gm, err := scrape(ctx, cl.gwURL+"/metrics")
	if err != nil {
		return Result{}, fmt.Errorf("gateway /metrics: %w", err)
	}
	res.Hits = gm.sum("agentserve_affinity_hits_total")
	res.Misses = gm.sum("agentserve_affinity_misses_total")
	for _, u := range cl.urls {
		bm, err := scrape(ctx, u+"/metrics")
		if err != nil {
			return Result{}, fmt.Errorf("backend /metrics: %w", err)
		}
		res.CacheQueries += bm.sum("vllm:prefix_cache_queries_total")
		res.CacheHits += bm.sum("vllm:prefix_cache_hits_total")
	}
	return res, nil
}

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

func newBar(w io.Writer, total int, desc string) *progressbar.ProgressBar {
	if w == nil {
		return progressbar.NewOptions(total, progressbar.OptionSetVisibility(false))
	}
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { _, _ = fmt.Fprintln(w) }),
	)
}

// percentile returns the q-quantile (0..1) by the nearest-rank method.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}
