package affinity_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

func TestConfigJSON(t *testing.T) {
	cases := []struct {
		name      string
		json      string
		wantTTL   time.Duration // TTL of the default tier, checked when no error
		wantErr   string        // substring of the error (field name), "" = no error
		decodeErr bool          // the error comes from json.Unmarshal rather than New
	}{
		{"omitted key -> default", `{}`, 1800 * time.Second, "", false},
		{"explicit 0 disables", `{"sticky_ttl_seconds": 0}`, 0, "", false},
		{"explicit value", `{"sticky_ttl_seconds": 60, "max_bindings": 10, "max_session_id_bytes": 64}`, time.Minute, "", false},
		{"null is omitted", `{"sticky_ttl_seconds": null}`, 1800 * time.Second, "", false},
		{"negative", `{"sticky_ttl_seconds": -1}`, 0, "sticky_ttl_seconds: -1: must be whole seconds, 0..9223372036 (0: affinity off; omitted: the default, 1800)", false},
		{"overflows int64", `{"sticky_ttl_seconds": 99999999999999999999}`, 0, "sticky_ttl_seconds", true},
		{"overflows nanoseconds", `{"sticky_ttl_seconds": 9223372037}`, 0, "sticky_ttl_seconds: 9223372037: must be whole seconds, 0..9223372036 (0: affinity off; omitted: the default, 1800)", false},
		{"largest", `{"sticky_ttl_seconds": 9223372036}`, 9223372036 * time.Second, "", false},
		{"fraction", `{"sticky_ttl_seconds": 1.5}`, 0, "sticky_ttl_seconds", true},
		{"string", `{"sticky_ttl_seconds": "1800"}`, 0, "sticky_ttl_seconds", true},
		{"negative max_bindings", `{"max_bindings": -1}`, 0, "max_bindings: -1", false},
		{"huge max_bindings", `{"max_bindings": 4294967296}`, 0, "max_bindings", strconv.IntSize < 64}, // a decode error where int is 32 bits
		{"negative max_session_id_bytes", `{"max_session_id_bytes": -3}`, 0, "max_session_id_bytes: -3: must be >= 0 (0 or omitted: the default, 256)", false},
		{"tier negative", `{"tiers": {"gold": {"sticky_ttl_seconds": -5}}}`, 0, "tiers.gold.sticky_ttl_seconds: -5: must be whole seconds, 0..9223372036 (0: affinity off; omitted: inherits sticky_ttl_seconds)", false},
		{"tier overflow", `{"tiers": {"gold": {"sticky_ttl_seconds": 1e30}}}`, 0, "tiers.gold.sticky_ttl_seconds", true},
		{"tier wrong type named", `{"tiers": {"a": {}, "gold": {"sticky_ttl_seconds": "60"}, "z": {"sticky_ttl_seconds": 5}}}`, 0, "tiers.gold.sticky_ttl_seconds", true},
		// Tiers[""] overrode sticky_ttl_seconds without a word; one place sets it now.
		{"default tier in tiers", `{"sticky_ttl_seconds": 100, "tiers": {"": {"sticky_ttl_seconds": 5}}}`, 0, `tiers[""]: the default tier's TTL is sticky_ttl_seconds`, false},
		{"default tier in tiers, no TTL", `{"tiers": {"": {}}}`, 0, `tiers[""]`, false},
		{"blank tier name", `{"tiers": {" ": {"sticky_ttl_seconds": 5}}}`, 0, `tiers[" "]: a blank tier name`, false},
		{"blank tier name, tab", `{"tiers": {"\t": {}}}`, 0, `tiers["\t"]: a blank tier name`, false},
		{"tier name too long", `{"tiers": {"` + strings.Repeat("g", 256) + `": {}}}`, 0, "tiers: name", false},
		{"not an object", `[1, 2]`, 0, "invalid config", true},
		{"tiers ok", `{"sticky_ttl_seconds": 100, "tiers": {"gold": {"sticky_ttl_seconds": 0}, "silver": {}}}`, 100 * time.Second, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cfg affinity.Config
			err := json.Unmarshal([]byte(tc.json), &cfg)
			if err == nil {
				err = cfg.Validate()
				if err == nil {
					var s *affinity.Scheduler
					s, err = affinity.New(cfg)
					if err == nil {
						assert.Equal(t, tc.wantTTL, s.Table().TTL(""))
					}
				} else {
					_, nerr := affinity.New(cfg)
					assert.Equal(t, err, nerr, "New reports what Validate reports")
				}
			} else {
				assert.True(t, tc.decodeErr, "unexpected decode error %v", err)
			}
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, affinity.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	for _, cfg := range []affinity.Config{
		{},
		{StickyTTLSeconds: affinity.TTLSeconds(0)},
		{StickyTTLSeconds: affinity.TTLSeconds(60), MaxBindings: 5, MaxSessionIDBytes: 7,
			Tiers: map[string]affinity.TierConfig{"a": {StickyTTLSeconds: affinity.TTLSeconds(0)}, "b": {}}},
	} {
		data, err := json.Marshal(cfg)
		require.NoError(t, err)
		var got affinity.Config
		require.NoError(t, json.Unmarshal(data, &got))
		assert.Equal(t, cfg, got, "%s", data)
	}
	data, _ := json.Marshal(affinity.Config{})
	assert.JSONEq(t, `{"max_bindings":0,"max_session_id_bytes":0}`, string(data), "nil TTL is omitted, so it stays the default")
	data, _ = json.Marshal(affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(0)})
	assert.Contains(t, string(data), `"sticky_ttl_seconds":0`, "0 is kept")
}

func TestConfigYAMLHook(t *testing.T) {
	// UnmarshalYAML takes the decoder's callback; feed it a JSON decoder to check the
	// wiring and the error wrapping without a YAML dependency.
	var cfg affinity.Config
	require.NoError(t, cfg.UnmarshalYAML(func(v any) error { return json.Unmarshal([]byte(`{"sticky_ttl_seconds": 0}`), v) }))
	require.NotNil(t, cfg.StickyTTLSeconds)
	assert.Equal(t, int64(0), *cfg.StickyTTLSeconds)
	err := cfg.UnmarshalYAML(func(any) error { return errors.New("yaml: cannot unmarshal !!str `x` into int64") })
	assert.ErrorIs(t, err, affinity.ErrInvalidConfig)
}

// yaml.v2 and yaml.v3 truncate a float into an int field (0.9 -> 0 would turn affinity
// off, -0.5 -> 0 would pass as valid); UnmarshalYAML must reject a fractional number.
func TestConfigYAMLHookRejectsFractions(t *testing.T) {
	// truncating emulates those decoders: a typed int target gets the truncated value,
	// an untyped (any) target the number as read.
	truncating := func(doc, truncated string) func(any) error {
		return func(v any) error {
			var te *json.UnmarshalTypeError
			err := json.Unmarshal([]byte(doc), v)
			if errors.As(err, &te) {
				return json.Unmarshal([]byte(truncated), v)
			}
			return err
		}
	}
	cases := []struct{ doc, truncated, wantErr string }{
		{`{"sticky_ttl_seconds": 0.9}`, `{"sticky_ttl_seconds": 0}`, "sticky_ttl_seconds: 0.9 is not a whole number"},
		{`{"sticky_ttl_seconds": -0.5}`, `{"sticky_ttl_seconds": 0}`, "sticky_ttl_seconds: -0.5 is not a whole number"},
		{`{"max_bindings": 2.7}`, `{"max_bindings": 2}`, "max_bindings: 2.7 is not a whole number"},
		{`{"max_session_id_bytes": 0.5}`, `{"max_session_id_bytes": 0}`, "max_session_id_bytes: 0.5 is not a whole number"},
		{`{"tiers": {"gold": {"sticky_ttl_seconds": 2.5}}}`, `{"tiers": {"gold": {"sticky_ttl_seconds": 2}}}`, "tiers.gold.sticky_ttl_seconds: 2.5 is not a whole number"},
		{`{"max_bindings": 1e19}`, `{"max_bindings": 0}`, "max_bindings: 1e+19 is out of range"},
		{`{"load": {"balance_factor": 1.25, "queued_request_cost": 1e19}}`, `{}`, "load.queued_request_cost: 1e+19 is out of range"},
		{`{"load": {"balance_factor": "1e400"}}`, `{}`, "load.balance_factor: \"1e400\" is not a number"},
	}
	for _, tc := range cases {
		t.Run(tc.doc, func(t *testing.T) {
			var cfg affinity.Config
			err := cfg.UnmarshalYAML(truncating(tc.doc, tc.truncated))
			require.ErrorIs(t, err, affinity.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.Equal(t, affinity.Config{}, cfg, "nothing decoded on error")
		})
	}
	// Whole numbers are accepted, whatever their spelling.
	var cfg affinity.Config
	require.NoError(t, cfg.UnmarshalYAML(truncating(`{"sticky_ttl_seconds": 1e3, "max_bindings": 10}`, `{"sticky_ttl_seconds": 1000, "max_bindings": 10}`)))
	require.NotNil(t, cfg.StickyTTLSeconds)
	assert.Equal(t, int64(1000), *cfg.StickyTTLSeconds)
	assert.Equal(t, 10, cfg.MaxBindings)
}

func TestConfigValidate(t *testing.T) {
	tiers := map[string]affinity.TierConfig{}
	for i := range 70 {
		tiers[string(rune('a'+i%26))+strings.Repeat("x", i)] = affinity.TierConfig{StickyTTLSeconds: affinity.TTLSeconds(int64(i + 1))}
	}
	err := affinity.Config{Tiers: tiers}.Validate()
	require.ErrorIs(t, err, affinity.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "distinct sticky_ttl_seconds")
	if strconv.IntSize == 64 { // 2^31 does not fit a 32-bit int
		maxB := int64(affinity.MaxMaxBindings)
		require.NoError(t, affinity.Config{MaxBindings: int(maxB)}.Validate())
	}
	_, err = affinity.NewTable(affinity.Config{MaxBindings: -1})
	assert.ErrorIs(t, err, affinity.ErrInvalidConfig)
}
