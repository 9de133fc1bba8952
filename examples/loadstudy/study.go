package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/schollz/progressbar/v3"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

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
