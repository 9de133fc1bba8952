package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/affinity"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

func smallParams() Params {
	p := DefaultParams()
	p.Sessions, p.Turns, p.Concurrency, p.PromptBytes = 3, 3, 2, 1024
	p.Sleep = noSleep
	return p
}

func TestStudySmall(t *testing.T) {
	p := smallParams()
	results, err := Run(context.Background(), p)
	require.NoError(t, err)
	require.Len(t, results, 2)

	on, off := results[0], results[1]
	assert.Equal(t, 9, on.Requests)
	assert.Equal(t, 6.0, on.Hits, "hits from the gateway's /metrics")
	assert.Equal(t, 3.0, on.Misses)
	assert.Equal(t, 2.0/3.0, on.HitRate())
	assert.Len(t, on.Cold, 3)
	assert.Len(t, on.Warm, 6)
	assert.Equal(t, 3, on.ColdByCache, "misses and cache-cold turns agree")
	assert.Greater(t, on.CacheHitRate(), 0.5)

	assert.Equal(t, 9, off.Requests, "off-sessions defaults to sessions*turns")
	assert.Equal(t, 0.0, off.HitRate())
	assert.Len(t, off.Cold, 9)
	assert.Empty(t, off.Warm)
	assert.Less(t, off.CacheHitRate(), 0.05, "sessions share no prefix")

	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, p, results))
	out := buf.String()
	assert.Contains(t, out, "| affinity ON (3 sessions x 3 turns) | 9 | 66.7 % |")
	assert.Contains(t, out, "| affinity OFF (9 single-turn sessions) | 9 | 0.0 % |")
}

// With -no-prompt-tokens-details the backends report no cached tokens: the study runs as
// before (hits and the backends' own cache counters unchanged) and the table says so
// instead of comparing misses with cached_tokens.
func TestStudyNoPromptTokensDetails(t *testing.T) {
	p := smallParams()
	p.NoPromptTokensDetails = true
	results, err := Run(context.Background(), p)
	require.NoError(t, err)
	on := results[0]
	assert.Equal(t, 2.0/3.0, on.HitRate())
	assert.Equal(t, 9, on.ColdByCache, "no turn reported its cached tokens")
	assert.Greater(t, on.CacheHitRate(), 0.5, "the backends' prefix caches still hit")
	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, p, results))
	assert.Contains(t, buf.String(), "the gateway learned no cached tokens")
	assert.NotContains(t, buf.String(), "Note:")
}

func TestParamsValidation(t *testing.T) {
	for _, mutate := range []func(*Params){
		func(p *Params) { p.Backends = 0 },
		func(p *Params) { p.Concurrency = 0 },
		func(p *Params) { p.Turns = 0 },
		func(p *Params) { p.TimeScale = 0 },
		func(p *Params) { p.PromptBytes = 10 },
	} {
		p := smallParams()
		mutate(&p)
		_, err := Run(context.Background(), p)
		assert.Error(t, err)
	}
}

func TestRunFlags(t *testing.T) {
	assert.Error(t, run([]string{"-backends", "0"}))
	assert.Error(t, run([]string{"-nope"}))
	assert.Error(t, run([]string{"extra"}))
}

func TestStudySkewed(t *testing.T) {
	p := smallParams()
	p.Skewed, p.SkewSessions, p.SkewConcurrency = true, 4, 4
	conds := p.Conditions()
	require.Len(t, conds, 6)
	assert.Nil(t, conds[2].Load, "sticky: no load awareness")
	require.NotNil(t, conds[3].Load, "load-aware")
	assert.Equal(t, RecommendedLoad(), *conds[3].Load, "the recommended settings of examples/configs/gateway.yaml")
	assert.Contains(t, conds[3].Name, "drain_tokens_per_second 16000, retention_guard_factor 2.5")
	require.NotNil(t, conds[4].Load, "load-aware, lease-sum view")
	assert.Equal(t, affinity.LoadConfig{BalanceFactor: 1.25, SpillCostWeight: affinity.SpillWeight(5), MinRequestCost: 4096}, *conds[4].Load,
		"the recommended settings without the drain-model and cache-loss keys (min_request_cost kept)")
	assert.Nil(t, conds[5].Load, "off")
	p2 := p
	p2.SkewLoad = leaseSum(p.SkewLoad)
	assert.Len(t, p2.Conditions(), 5, "a lease-sum SkewLoad is not run twice")
	assert.Equal(t, 10*p.PromptBytes, promptBytes(p, conds[2], 0), "every fourth session is 10x")
	assert.Equal(t, p.PromptBytes, promptBytes(p, conds[2], 1))

	results, err := Run(context.Background(), p)
	require.NoError(t, err)
	require.Len(t, results, 6)
	sticky, aware, leaseSum, off := results[2], results[3], results[4], results[5]
	assert.Equal(t, 12, sticky.Requests)
	assert.Equal(t, 2.0/3.0, sticky.HitRate(), "turn 1 misses, turns 2-3 hit")
	assert.Equal(t, 12, aware.Requests)
	assert.GreaterOrEqual(t, aware.HitRate(), 0.5, "load awareness keeps most bindings")
	assert.Equal(t, 12, leaseSum.Requests)
	assert.GreaterOrEqual(t, leaseSum.HitRate(), 0.5)
	assert.Equal(t, 0.0, off.HitRate())

	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, p, results))
	assert.Contains(t, buf.String(), "| skewed: sticky (4 sessions x 3 turns, c=4) | 12 | 66.7 % |")
	assert.Contains(t, buf.String(), "Skewed scenario: every fourth session has a 10240-byte system prompt")

	p.SkewLoad.BalanceFactor = 0.5
	_, err = Run(context.Background(), p)
	assert.Error(t, err, "invalid load block")
}
