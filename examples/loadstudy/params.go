package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
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

	// NoPromptTokensDetails makes the backends send usage.prompt_tokens_details as null
	// (fakevllm.Config.NoPromptTokensDetails: vLLM's default, without
	// --enable-prompt-tokens-details), so the gateway learns no cached tokens; the
	// cached_tokens note of the table is then left out.
	NoPromptTokensDetails bool

	// Progress receives the progress bar; nil shows none.
	Progress io.Writer
	// Sleep, when set, replaces the simulators' sleep (tests inject a no-op).
	Sleep func(ctx context.Context, d time.Duration) error
}

// DefaultParams reproduce the project's reference load study (README, "The two
// commands"): 3 backends, concurrency 6, a 3 KB system prompt, 12 sessions x 6 turns vs
// 72 single-turn sessions.
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
// retention_guard_factor 2.5, min_request_cost 4096.
func RecommendedLoad() affinity.LoadConfig {
	return affinity.LoadConfig{
		BalanceFactor:        1.25,
		SpillCostWeight:      affinity.SpillWeight(5),
		ColdCacheRatio:       0.001,
		DrainTokensPerSecond: 16000,
		RetentionGuardFactor: 2.5,
		MinRequestCost:       4096,
	}
}

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
// load view the skewed scenario compares with the recommended settings (min_request_cost
// kept: it is not a drain-model key).
func leaseSum(l affinity.LoadConfig) affinity.LoadConfig {
	return affinity.LoadConfig{BalanceFactor: l.BalanceFactor, SpillCostWeight: l.SpillCostWeight,
		DisableSpill: l.DisableSpill, QueuedRequestCost: l.QueuedRequestCost, MinRequestCost: l.MinRequestCost}
}

// loadName lists the load keys a condition sets, e.g. "balance_factor 1.25,
// spill_cost_weight 5, drain_tokens_per_second 16000".
func loadName(l affinity.LoadConfig) string {
	parts := []string{fmt.Sprintf("balance_factor %g", l.BalanceFactor)}
	if l.SpillCostWeight != nil {
		parts = append(parts, fmt.Sprintf("spill_cost_weight %g", *l.SpillCostWeight))
	}
	if l.MinRequestCost != 0 {
		parts = append(parts, fmt.Sprintf("min_request_cost %d", l.MinRequestCost))
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
