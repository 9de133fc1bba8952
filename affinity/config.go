package affinity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults applied by [New] and [NewTable] to a zero or omitted [Config] field.
const (
	// DefaultStickyTTLSeconds is the sticky TTL when sticky_ttl_seconds is omitted (nil).
	DefaultStickyTTLSeconds = 1800
	// DefaultMaxBindings is the binding cap when max_bindings is 0.
	DefaultMaxBindings = 1 << 20
	// DefaultMaxSessionIDBytes is the session ID limit when max_session_id_bytes is 0.
	DefaultMaxSessionIDBytes = 256
	// MaxTierBytes is the longest tier name accepted (the key stores its length in one byte).
	MaxTierBytes = 255
	// MaxStickyTTLSeconds is the largest TTL accepted: its nanoseconds must fit an int64
	// (about 292 years).
	MaxStickyTTLSeconds = math.MaxInt64 / int64(time.Second)
	// MaxMaxBindings is the largest max_bindings accepted (2^31).
	MaxMaxBindings = 1 << 31
	// maxTTLClasses bounds the number of distinct non-zero TTLs (default + tier overrides);
	// an insert costs O(distinct TTLs), see [Table].
	maxTTLClasses = 64
)

// Config is the plain-data configuration of a [Scheduler] (and a [Table]), validated once
// by [New]. Its yaml/json keys are the README's (section "Configuration"). The zero value is
// valid and means: TTL 1800 s, 1,048,576 bindings, 256-byte session IDs, no tier overrides.
type Config struct {
	// StickyTTLSeconds is the sliding TTL of a binding in seconds. nil (key omitted) means
	// DefaultStickyTTLSeconds (1800); 0 disables affinity (every call is a miss returning
	// the HRW winner and nothing is stored); negative or above MaxStickyTTLSeconds is
	// ErrInvalidConfig. Use [TTLSeconds] to build one in code.
	StickyTTLSeconds *int64 `yaml:"sticky_ttl_seconds,omitempty" json:"sticky_ttl_seconds,omitempty"`
	// MaxBindings caps the number of stored bindings; 0 means DefaultMaxBindings
	// (1,048,576). At the cap the least-recently-used binding (of the shard the new
	// binding goes to) is evicted and counted. Negative or above MaxMaxBindings is
	// ErrInvalidConfig.
	MaxBindings int `yaml:"max_bindings" json:"max_bindings"`
	// MaxSessionIDBytes is the longest session ID accepted, in bytes; 0 means
	// DefaultMaxSessionIDBytes (256). Negative is ErrInvalidConfig. Lookups never allocate,
	// whatever the limit; only a stored binding copies the ID (see [Table]).
	MaxSessionIDBytes int `yaml:"max_session_id_bytes" json:"max_session_id_bytes"`
	// Tiers overrides the TTL per tier name (at most MaxTierBytes bytes each). A tier not
	// listed, or listed with a nil TTL, uses StickyTTLSeconds. At most 64 distinct
	// non-zero TTL values overall. The empty name (the default tier) is ErrInvalidConfig:
	// its TTL is StickyTTLSeconds; so is a blank one (only spaces, e.g. " ").
	Tiers map[string]TierConfig `yaml:"tiers,omitempty" json:"tiers,omitempty"`
	// Load turns on load awareness for [Scheduler.Acquire] (bounded-load placement and
	// spill of overloaded bindings); the zero value (key omitted) keeps pure stickiness.
	// See [LoadConfig].
	Load LoadConfig `yaml:"load,omitempty" json:"load,omitzero"`
}

// TierConfig is the per-tier part of [Config].
type TierConfig struct {
	// StickyTTLSeconds overrides Config.StickyTTLSeconds for this tier; nil inherits it,
	// 0 disables affinity for this tier only. Same limits as Config.StickyTTLSeconds.
	StickyTTLSeconds *int64 `yaml:"sticky_ttl_seconds,omitempty" json:"sticky_ttl_seconds,omitempty"`
}

// TTLSeconds returns a pointer to n, for building a Config in code:
// Config{StickyTTLSeconds: TTLSeconds(0)} disables affinity.
func TTLSeconds(n int64) *int64 { return &n }

// Validate reports the first invalid field as an error wrapping ErrInvalidConfig that
// names the field by its yaml/json key and shows the value. It does not modify c.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolved is a validated Config with the defaults applied.
type resolved struct {
	defTTL      time.Duration // 0 = disabled
	maxBindings int
	maxSession  int
	tierTTL     map[string]time.Duration // only tiers whose TTL differs from defTTL
	load        loadParams
}

// checkTTL converts the TTL at field (nil: -1, inherit) or says why it is out of range;
// omitted says what leaving the key out means, for the message (a 0 there is accepted
// and means "off", so the range alone would not tell).
func checkTTL(field, omitted string, p *int64) (time.Duration, error) {
	if p == nil {
		return -1, nil // inherit
	}
	if v := *p; v < 0 || v > MaxStickyTTLSeconds {
		return 0, fmt.Errorf("%w: %s: %d: must be whole seconds, 0..%d (0: affinity off; omitted: %s)",
			ErrInvalidConfig, field, v, MaxStickyTTLSeconds, omitted)
	}
	return time.Duration(*p) * time.Second, nil
}

func (c Config) resolve() (resolved, error) {
	var r resolved
	ttl, err := checkTTL("sticky_ttl_seconds", "the default, "+strconv.Itoa(DefaultStickyTTLSeconds), c.StickyTTLSeconds)
	if err != nil {
		return r, err
	}
	if ttl < 0 {
		ttl = DefaultStickyTTLSeconds * time.Second
	}
	r.defTTL = ttl
	switch {
	case c.MaxBindings < 0 || int64(c.MaxBindings) > MaxMaxBindings: // int64: builds where int is 32 bits
		return r, fmt.Errorf("%w: max_bindings: %d out of range [0, %d]", ErrInvalidConfig, c.MaxBindings, int64(MaxMaxBindings))
	case c.MaxBindings == 0:
		r.maxBindings = DefaultMaxBindings
	default:
		r.maxBindings = c.MaxBindings
	}
	switch {
	case c.MaxSessionIDBytes < 0:
		return r, fmt.Errorf("%w: max_session_id_bytes: %d: must be >= 0 (0 or omitted: the default, %d)",
			ErrInvalidConfig, c.MaxSessionIDBytes, DefaultMaxSessionIDBytes)
	case c.MaxSessionIDBytes == 0:
		r.maxSession = DefaultMaxSessionIDBytes
	default:
		r.maxSession = c.MaxSessionIDBytes
	}
	distinct := map[time.Duration]bool{}
	if ttl > 0 {
		distinct[ttl] = true
	}
	if _, ok := c.Tiers[""]; ok {
		// Decision: one place sets the default tier's TTL. Tiers[""] silently overrode
		// StickyTTLSeconds (and the gateway refuses the same key in its config).
		return r, fmt.Errorf(`%w: tiers[""]: the default tier's TTL is sticky_ttl_seconds (StickyTTLSeconds); set it there`, ErrInvalidConfig)
	}
	for name, tc := range c.Tiers {
		if strings.TrimSpace(name) == "" {
			// Decision: a blank name (" ") is no tier a caller means: the gateway trims
			// the tier header, so no request could ever name it.
			return r, fmt.Errorf("%w: tiers[%q]: a blank tier name; name the tier (the default tier's TTL is sticky_ttl_seconds)", ErrInvalidConfig, name)
		}
		if len(name) > MaxTierBytes {
			return r, fmt.Errorf("%w: tiers: name %s is %d bytes (max %d)", ErrInvalidConfig, errTrunc(name), len(name), MaxTierBytes)
		}
		tt, err := checkTTL("tiers."+name+".sticky_ttl_seconds", "inherits sticky_ttl_seconds", tc.StickyTTLSeconds)
		if err != nil {
			return r, err
		}
		if tt < 0 || tt == ttl {
			continue
		}
		if r.tierTTL == nil {
			r.tierTTL = map[string]time.Duration{}
		}
		r.tierTTL[name] = tt
		if tt > 0 {
			distinct[tt] = true
		}
	}
	if len(distinct) > maxTTLClasses {
		return r, fmt.Errorf("%w: tiers: %d distinct sticky_ttl_seconds values (max %d)", ErrInvalidConfig, len(distinct), maxTTLClasses)
	}
	if r.load, err = c.Load.resolve(); err != nil {
		return r, err
	}
	return r, nil
}

// UnmarshalJSON decodes c like encoding/json would (keys as documented on Config; a
// missing key leaves the field as it was), except that a value of the wrong type or out of
// the field's range (for example sticky_ttl_seconds: 1e30) is reported as ErrInvalidConfig
// naming the field, and that an unknown key at any depth (a typo such as
// load.balance_fctor) is ErrInvalidConfig naming the key, whether or not the caller's
// decoder disallows unknown fields: a misspelt key must not silently leave a feature off.
// It does not run Validate; New does.
func (c *Config) UnmarshalJSON(data []byte) error {
	type config Config // no methods: plain decoding
	p := config(*c)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field := te.Field
			if strings.HasPrefix(field, "tiers.") {
				field = tierField(data, field)
			}
			return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, field, err)
		}
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	*c = Config(p)
	return nil
}

// tierField names the tier in the path of a tier entry that failed to decode
// ("tiers.sticky_ttl_seconds" -> "tiers.gold.sticky_ttl_seconds"): encoding/json leaves
// map keys out of UnmarshalTypeError.Field. It returns field unchanged if no entry fails.
func tierField(data []byte, field string) string {
	var raw struct {
		Tiers map[string]json.RawMessage `json:"tiers"`
	}
	if json.Unmarshal(data, &raw) != nil {
		return field
	}
	for _, name := range slices.Sorted(maps.Keys(raw.Tiers)) {
		var tc TierConfig
		if json.Unmarshal(raw.Tiers[name], &tc) != nil {
			return "tiers." + name + strings.TrimPrefix(field, "tiers")
		}
	}
	return field
}

// UnmarshalYAML implements the function-style YAML unmarshaler understood by
// gopkg.in/yaml.v2 and yaml.v3 (so the core needs no YAML dependency): it decodes into
// c and wraps any decoding error (wrong type, overflowing integer) in ErrInvalidConfig.
// A number with a fractional part (sticky_ttl_seconds: 0.9), which those decoders would
// silently truncate into the integer field, is ErrInvalidConfig naming the field, as in
// JSON. It does not run Validate; New does.
func (c *Config) UnmarshalYAML(unmarshal func(any) error) error {
	// The numbers as read come first, so a value the typed decoding would refuse without
	// naming its key (an integer past int64, a float past float64 read as a string) is
	// reported with the key.
	var raw yamlNumbers
	if err := unmarshal(&raw); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := raw.check(); err != nil {
		return err
	}
	type config Config // no methods: plain decoding
	p := config(*c)
	if err := unmarshal(&p); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	*c = Config(p)
	return nil
}

// yamlNumbers holds the integer keys of Config as the YAML decoder read them, before any
// conversion: yaml.v2 and yaml.v3 convert a float into an int field by truncation, so
// 0.9 would turn affinity off and -0.5 would pass as 0. Load and each tier are read as
// maps, which take any key: a misspelt key there is left to the typed decoding, whose
// strict-mode message names the key, its line and LoadConfig or TierConfig (a struct
// here would put its whole anonymous type in the message). Other keys, misspelt ones
// included, land in Rest and are left to the typed decoding too (its message names the
// key and affinity.config, not this type).
type yamlNumbers struct {
	StickyTTLSeconds  any                       `yaml:"sticky_ttl_seconds" json:"sticky_ttl_seconds"`
	MaxBindings       any                       `yaml:"max_bindings" json:"max_bindings"`
	MaxSessionIDBytes any                       `yaml:"max_session_id_bytes" json:"max_session_id_bytes"`
	Tiers             map[string]map[string]any `yaml:"tiers" json:"tiers"`
	Load              map[string]any            `yaml:"load" json:"load"`
	Rest              map[string]any            `yaml:",inline" json:"-"`
}

func (r yamlNumbers) check() error {
	if err := wholeNumber("sticky_ttl_seconds", r.StickyTTLSeconds); err != nil {
		return err
	}
	if err := wholeNumber("max_bindings", r.MaxBindings); err != nil {
		return err
	}
	if err := wholeNumber("max_session_id_bytes", r.MaxSessionIDBytes); err != nil {
		return err
	}
	for _, key := range []string{"queued_request_cost", "min_request_cost"} {
		if err := wholeNumber("load."+key, r.Load[key]); err != nil {
			return err
		}
	}
	for _, key := range []string{
		"balance_factor", "spill_cost_weight", "cold_cache_ratio", "drain_tokens_per_second",
		"drain_ewma_weight", "retention_guard_factor",
	} {
		if s, ok := r.Load[key].(string); ok { // e.g. 1e400: past float64, so YAML reads a string
			return fmt.Errorf("%w: load.%s: %s is not a number in float64's range", ErrInvalidConfig, key, quote(s))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Tiers)) {
		if err := wholeNumber("tiers."+name+".sticky_ttl_seconds", r.Tiers[name]["sticky_ttl_seconds"]); err != nil {
			return err
		}
	}
	return nil
}

// wholeNumber rejects a decoded float that is not a finite whole number; other values
// (integers, null, absent) were already judged by the typed decoding.
func wholeNumber(field string, v any) error {
	switch n := v.(type) {
	case float64:
		if math.IsInf(n, 0) || n != math.Trunc(n) {
			return fmt.Errorf("%w: %s: %v is not a whole number", ErrInvalidConfig, field, n)
		}
		if n >= 1<<63 || n < -(1<<63) {
			return fmt.Errorf("%w: %s: %v is out of range (|n| < 2^63)", ErrInvalidConfig, field, n)
		}
	case uint64: // YAML reads an integer in [2^63, 2^64) as uint64
		if n > math.MaxInt64 {
			return fmt.Errorf("%w: %s: %v is out of range (|n| < 2^63)", ErrInvalidConfig, field, n)
		}
	}
	return nil
}

func quote(s string) string { return strconv.Quote(s) }
