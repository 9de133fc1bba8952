package fakevllm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidConfig is returned (wrapped, with the offending field and value) by [New] and
// [Config.Validate] for a negative size, duration or time scale, a NaN or infinite time
// scale, default_max_tokens above [MaxOutputTokens] or block_tokens above 1<<20.
var ErrInvalidConfig = errors.New("fakevllm: invalid config")

// Defaults applied by [New] to zero Config fields, and the request limits
// MaxOutputTokens and MaxRequestBodyBytes.
const (
	DefaultModel           = "fake-model"
	DefaultBlockTokens     = 16 // vLLM's default block size
	DefaultCacheBlocks     = 4096
	DefaultPrefillPerToken = time.Millisecond
	DefaultDecodePerToken  = 20 * time.Millisecond
	DefaultMaxConcurrent   = 4
	DefaultTimeScale       = 1.0
	DefaultMaxTokens       = 64
	DefaultID              = "fakevllm"
	MaxOutputTokens        = 32768   // larger max_tokens / max_completion_tokens are a 400
	MaxRequestBodyBytes    = 8 << 20 // larger request bodies are a 413
)

// Config is the simulator's plain-data configuration. Every zero field takes its default
// (the Default* constants); negative values are [ErrInvalidConfig] (see [Config.Validate]
// for the other limits). The two time.Duration fields decode from JSON as integer
// nanoseconds and from YAML (yaml.v3) as a duration string such as "1ms".
type Config struct {
	// ID names this backend: the X-Fakevllm-Backend response header and the "backend"
	// label of its /metrics. Default "fakevllm".
	ID string `yaml:"id" json:"id"`
	// Model is the model listed by GET /v1/models and reported when a request names none.
	// Default "fake-model". Requests may name any model; it is echoed back.
	Model string `yaml:"model" json:"model"`
	// BlockTokens is the prefix-cache block size in tokens. Default 16 (vLLM's default);
	// at most 1<<20.
	BlockTokens int `yaml:"block_tokens" json:"block_tokens"`
	// CacheBlocks is the prefix cache's LRU capacity in blocks. Default 4096.
	CacheBlocks int `yaml:"cache_blocks" json:"cache_blocks"`
	// PrefillPerToken is the simulated prefill time per uncached prompt token, before
	// TimeScale. Default 1ms.
	PrefillPerToken time.Duration `yaml:"prefill_per_token" json:"prefill_per_token"`
	// DecodePerToken is the simulated decode time per output token, before TimeScale.
	// Default 20ms.
	DecodePerToken time.Duration `yaml:"decode_per_token" json:"decode_per_token"`
	// MaxConcurrent caps running sequences; further requests wait in FIFO order. Default 4.
	MaxConcurrent int `yaml:"max_concurrent" json:"max_concurrent"`
	// TimeScale multiplies every simulated duration (0.01 makes a study 100x faster).
	// Default 1. To skip waiting entirely, inject a no-op sleep with [WithSleep].
	TimeScale float64 `yaml:"time_scale" json:"time_scale"`
	// DefaultMaxTokens is the number of output tokens when a request sets neither
	// max_tokens nor max_completion_tokens. Default 64; at most MaxOutputTokens.
	DefaultMaxTokens int `yaml:"default_max_tokens" json:"default_max_tokens"`
	// NoPromptTokensDetails sends usage.prompt_tokens_details as null, as vLLM does unless
	// started with --enable-prompt-tokens-details (off by default): the client then learns
	// no cached_tokens. The prefix cache and its timing are unchanged. Default false (the
	// details with cached_tokens are sent).
	NoPromptTokensDetails bool `yaml:"no_prompt_tokens_details" json:"no_prompt_tokens_details"`
}

// Validate reports the first invalid field as an error wrapping [ErrInvalidConfig]. Zero
// fields are valid (they mean "default").
func (c Config) Validate() error {
	switch {
	case c.BlockTokens < 0:
		return fmt.Errorf("%w: block_tokens %d < 0", ErrInvalidConfig, c.BlockTokens)
	case c.CacheBlocks < 0:
		return fmt.Errorf("%w: cache_blocks %d < 0", ErrInvalidConfig, c.CacheBlocks)
	case c.PrefillPerToken < 0:
		return fmt.Errorf("%w: prefill_per_token %v < 0", ErrInvalidConfig, c.PrefillPerToken)
	case c.DecodePerToken < 0:
		return fmt.Errorf("%w: decode_per_token %v < 0", ErrInvalidConfig, c.DecodePerToken)
	case c.MaxConcurrent < 0:
		return fmt.Errorf("%w: max_concurrent %d < 0", ErrInvalidConfig, c.MaxConcurrent)
	case c.TimeScale < 0 || math.IsNaN(c.TimeScale) || math.IsInf(c.TimeScale, 0):
		return fmt.Errorf("%w: time_scale %v (want a finite value >= 0)", ErrInvalidConfig, c.TimeScale)
	case c.DefaultMaxTokens < 0 || c.DefaultMaxTokens > MaxOutputTokens:
		return fmt.Errorf("%w: default_max_tokens %d (want 0..%d)", ErrInvalidConfig, c.DefaultMaxTokens, MaxOutputTokens)
	case c.BlockTokens > 1<<20:
		return fmt.Errorf("%w: block_tokens %d > %d", ErrInvalidConfig, c.BlockTokens, 1<<20)
	}
	return nil
}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	c.ID = cmp.Or(c.ID, DefaultID)
	c.Model = cmp.Or(c.Model, DefaultModel)
	c.BlockTokens = cmp.Or(c.BlockTokens, DefaultBlockTokens)
	c.CacheBlocks = cmp.Or(c.CacheBlocks, DefaultCacheBlocks)
	c.PrefillPerToken = cmp.Or(c.PrefillPerToken, DefaultPrefillPerToken)
	c.DecodePerToken = cmp.Or(c.DecodePerToken, DefaultDecodePerToken)
	c.MaxConcurrent = cmp.Or(c.MaxConcurrent, DefaultMaxConcurrent)
	c.TimeScale = cmp.Or(c.TimeScale, DefaultTimeScale)
	c.DefaultMaxTokens = cmp.Or(c.DefaultMaxTokens, DefaultMaxTokens)
	return c
}

// Option customises a [Server] at construction. Options are code seams for tests, not
// configuration.
type Option interface{ apply(*options) }

type options struct {
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithSleep replaces the simulator's wait (default: a timer that returns ctx.Err() early
// when ctx is done). fn is called with the already time-scaled duration, on the request's
// goroutine, for every simulated wait: once for prefill, then once for all decoding
// (non-streaming) or once per output token (streaming). A non-nil error aborts the request
// as if the client had gone. Tests inject a no-op: func(ctx, d) error { return ctx.Err() }.
// A nil fn keeps the default.
func WithSleep(fn func(ctx context.Context, d time.Duration) error) Option {
	return optionFunc(func(o *options) {
		if fn != nil {
			o.sleep = fn
		}
	})
}

// WithNow replaces time.Now for the "created" timestamps of responses. A nil fn keeps the
// default.
func WithNow(fn func() time.Time) Option {
	return optionFunc(func(o *options) {
		if fn != nil {
			o.now = fn
		}
	})
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
