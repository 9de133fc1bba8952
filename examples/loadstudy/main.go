// Command loadstudy reproduces the reference load study of the project's design: it
// starts N fakevllm backends (a simulator, not vLLM) and the example gateway in-process
// on loopback ports, drives the gateway with the official OpenAI Go client, and prints a
// Markdown table comparing sticky sessions (affinity ON) with fresh single-turn sessions
// (affinity OFF).
//
//	go run -C examples ./loadstudy
//
// Each condition gets fresh backends and a fresh gateway, so no prefix cache or binding
// leaks from one to the other. The affinity hit rate is read back from the gateway's own
// /metrics (agentserve_affinity_hits_total and _misses_total), the prefix-cache hit rate
// from the backends' /metrics (vllm:prefix_cache_hits_total / _queries_total, summed).
// A turn counts as cold when the gateway reported an affinity miss. Every session has its
// own system prompt (it starts with a per-session environment block, as agent harnesses'
// prompts do), so a cold turn prefills the whole prompt and a warm one only the new tail.
// A progress bar goes to stderr, the table to stdout; any failed request fails the study
// with a non-zero exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "loadstudy:", err)
		os.Exit(1)
	}
}

// progressTo returns where the progress bars go: f when it is a terminal and not quiet,
// else nil (no bar), so redirected output, logs and CI never get bar frames.
func progressTo(f *os.File, quiet bool) io.Writer {
	if quiet || f == nil || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return f
}

func run(args []string) error {
	p := DefaultParams()
	fs := flag.NewFlagSet("loadstudy", flag.ContinueOnError)
	fs.IntVar(&p.Backends, "backends", p.Backends, "number of fakevllm backends")
	fs.IntVar(&p.Concurrency, "concurrency", p.Concurrency, "sessions driven concurrently")
	fs.IntVar(&p.Sessions, "sessions", p.Sessions, "affinity ON: number of sticky sessions")
	fs.IntVar(&p.Turns, "turns", p.Turns, "affinity ON: turns per session")
	fs.IntVar(&p.OffSessions, "off-sessions", 0, "affinity OFF: single-turn sessions (0 = sessions*turns)")
	fs.IntVar(&p.PromptBytes, "prompt-bytes", p.PromptBytes, "bytes of each session's system prompt")
	fs.IntVar(&p.MaxTokens, "max-tokens", p.MaxTokens, "output tokens per answer")
	fs.Float64Var(&p.TimeScale, "time-scale", p.TimeScale, "multiplies every simulated backend duration")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "seed for prompts and session IDs")
	fs.BoolVar(&p.Skewed, "skewed", false, "also run the skewed scenario (10x prompt sizes, high concurrency): sticky vs load-aware vs off")
	fs.IntVar(&p.SkewSessions, "skew-sessions", p.SkewSessions, "skewed scenario: sessions")
	fs.IntVar(&p.SkewConcurrency, "skew-concurrency", p.SkewConcurrency, "skewed scenario: sessions driven concurrently")
	factor := fs.Float64("skew-balance-factor", p.SkewLoad.BalanceFactor, "skewed scenario, load-aware: load.balance_factor")
	weight := fs.Float64("skew-spill-cost-weight", *p.SkewLoad.SpillCostWeight, "skewed scenario, load-aware: load.spill_cost_weight")
	cold := fs.Float64("skew-cold-cache-ratio", p.SkewLoad.ColdCacheRatio, "skewed scenario, load-aware: load.cold_cache_ratio (0 = library default 0.05)")
	drain := fs.Float64("skew-drain-tokens-per-second", p.SkewLoad.DrainTokensPerSecond, "skewed scenario, load-aware: load.drain_tokens_per_second (0 = lease-sum view)")
	guard := fs.Float64("skew-retention-guard-factor", p.SkewLoad.RetentionGuardFactor, "skewed scenario, load-aware: load.retention_guard_factor (0 = off; needs a drain rate)")
	minCost := fs.Int64("skew-min-request-cost", p.SkewLoad.MinRequestCost, "skewed and cached scenarios, load-aware: load.min_request_cost (0 = off)")
	fs.BoolVar(&p.NoPromptTokensDetails, "no-prompt-tokens-details", false, "backends send usage.prompt_tokens_details as null (vLLM's default without --enable-prompt-tokens-details)")
	cp := DefaultCachedParams()
	cached := fs.Bool("cached", false, "run the cached-decode scenario instead of the study: streaming sessions whose turns are fully cached, no load block vs the load block vs the load block + load.min_request_cost")
	fs.IntVar(&cp.Sessions, "cached-sessions", cp.Sessions, "cached scenario: streaming sessions driven at once")
	fs.IntVar(&cp.Turns, "cached-turns", cp.Turns, "cached scenario: turns per session before a new session replaces it")
	fs.IntVar(&cp.MaxTokens, "cached-max-tokens", cp.MaxTokens, "cached scenario: output tokens streamed per turn")
	fs.DurationVar(&cp.Duration, "cached-duration", cp.Duration, "cached scenario: wall-clock time per condition")
	minCosts := fs.String("cached-min-costs", "256,1024,4096", "cached scenario: load.min_request_cost values, comma-separated")
	quiet := fs.Bool("quiet", false, "no progress bar (there is none unless stderr is a terminal)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	p.SkewLoad.BalanceFactor, p.SkewLoad.SpillCostWeight = *factor, weight
	p.SkewLoad.ColdCacheRatio, p.SkewLoad.DrainTokensPerSecond, p.SkewLoad.RetentionGuardFactor = *cold, *drain, *guard
	p.SkewLoad.MinRequestCost = *minCost
	p.Progress = progressTo(os.Stderr, *quiet)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cached {
		costs, err := parseMinCosts(*minCosts)
		if err != nil {
			return err
		}
		cp.MinCosts = costs
		results, err := RunCached(ctx, p, cp)
		if err != nil {
			return err
		}
		return WriteCachedTable(os.Stdout, p, cp, results)
	}
	results, err := Run(ctx, p)
	if err != nil {
		return err
	}
	return WriteTable(os.Stdout, p, results)
}
