package gateway_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const minimal = `
backends:
  - {id: a, url: "http://127.0.0.1:8001"}
`

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte(minimal))
	require.NoError(t, err)
	assert.Equal(t, gateway.DefaultListen, cfg.Listen)
	assert.Equal(t, gateway.DefaultSessionHeaders(), cfg.SessionHeaders)
	assert.Equal(t, gateway.DefaultTierHeader, cfg.TierHeader)
	assert.Equal(t, gateway.DefaultMaxBodyBytes, cfg.MaxBodyBytes)
	assert.Equal(t, "/health", cfg.Health.Path)
	assert.Equal(t, new(true), cfg.Health.Enabled, "active health checks are on without a health: block")
	assert.False(t, cfg.RequireSession)
	assert.Nil(t, cfg.RetryOnConnectError, "omitted retry_on_connect_error means true")
	assert.Nil(t, cfg.Affinity.StickyTTLSeconds, "omitted sticky_ttl_seconds leaves the library default (1800)")
}

func TestParseConfigExplicitValues(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte(`
listen: "0.0.0.0:9000"
affinity: {sticky_ttl_seconds: 0, max_session_id_bytes: 64, tiers: {batch: {sticky_ttl_seconds: 60}}}
backends:
  - {id: a, url: "http://10.0.0.1:8000", weight: 2, tier: large}
  - {id: b, url: "https://10.0.0.2:8000/prefix/"}
session_headers: [X-My-Session]
tier_header: X-Tier
model_tiers: {big-model: large}
require_session: true
max_body_bytes: 1024
health: {enabled: true, path: /ready, interval_seconds: 1, failure_threshold: 2, passive_recheck_seconds: 3}
retry_on_connect_error: false
`))
	require.NoError(t, err)
	require.NotNil(t, cfg.Affinity.StickyTTLSeconds)
	assert.Equal(t, int64(0), *cfg.Affinity.StickyTTLSeconds, "an explicit 0 stays 0 (affinity off)")
	assert.Equal(t, 64, cfg.Affinity.MaxSessionIDBytes)
	assert.Equal(t, []string{"X-My-Session"}, cfg.SessionHeaders)
	assert.Equal(t, "large", cfg.ModelTiers["big-model"])
	assert.Equal(t, 2.0, cfg.Backends[0].Weight)
	assert.Equal(t, "/ready", cfg.Health.Path)
	assert.Equal(t, 2, cfg.Health.FailureThreshold)
	assert.Equal(t, 3.0, cfg.Health.PassiveRecheckSeconds)
	require.NotNil(t, cfg.RetryOnConnectError)
	assert.False(t, *cfg.RetryOnConnectError)
	assert.True(t, cfg.RequireSession)
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name     string
		yaml     string
		want     error
		contains []string // field and value named in the message
	}{
		{"unknown top-level key", "listen_addr: x\n" + minimal, gateway.ErrUnknownKey, []string{`line 1: unknown key "listen_addr" at the top level`}},
		{"unknown backend key", "backends: [{id: a, url: 'http://h:1', wieght: 2}]", gateway.ErrUnknownKey, []string{`unknown key "wieght" in backends[]`}},
		{"unknown affinity key", "affinity: {sticky_ttl: 5}\n" + minimal, gateway.ErrUnknownKey, []string{`unknown key "sticky_ttl" in affinity`}},
		{"unknown affinity.load key", "affinity: {load: {balance: 2}}\n" + minimal, gateway.ErrUnknownKey, []string{`unknown key "balance" in affinity.load`}},
		{"unknown tenant key", "backends: [{id: a, url: 'http://h:1'}]\ntenant: {api_key: true, headr: X}", gateway.ErrUnknownKey, []string{`unknown key "headr" in tenant`}},
		{"unknown health key", "health: {enable: true}\n" + minimal, gateway.ErrUnknownKey, []string{`unknown key "enable" in health`}},
		{"wrong type", "max_body_bytes: lots\n" + minimal, gateway.ErrConfigSyntax, []string{"lots"}},
		{"a second document", minimal + "---\nlisten: 127.0.0.1:1\nbogus_key: 1\n", gateway.ErrConfigSyntax, []string{"second YAML document", "one document"}},
		{"an empty second document", minimal + "---\n# nothing\n", gateway.ErrConfigSyntax, []string{"second YAML document"}},
		{"a malformed second document", minimal + "---\n[\n", gateway.ErrConfigSyntax, []string{"second YAML document", "did not find expected node content"}},
		{"the backends in a second document", "---\n---\n" + minimal, gateway.ErrConfigSyntax, []string{"line 2: a second YAML document"}},
		{"no backends", "listen: 127.0.0.1:8080\n", gateway.ErrNoBackends, []string{"backends"}},
		{"empty backends", "backends: []\n", gateway.ErrNoBackends, []string{"backends"}},
		// An empty file said "backends: at least one backend is required", as if a list
		// had been written.
		{"empty file", "", gateway.ErrNoBackends, []string{"the config is empty"}},
		{"only comments", "# nothing yet\n\n", gateway.ErrNoBackends, []string{"the config is empty"}},
		{"null document", "---\n", gateway.ErrNoBackends, []string{"the config is empty"}},
		{"empty backend id", "backends: [{url: 'http://h:1'}]", gateway.ErrBackendID, []string{"backends[0].id", "is empty"}},
		{"second backend id empty", "backends: [{id: a, url: 'http://h:1'}, {id: '', url: 'http://h:2'}]", gateway.ErrBackendID, []string{`backends[1].id: ""`, "is empty", "non-blank id"}},
		{"blank backend id", "backends: [{id: '  ', url: 'http://h:1'}]", gateway.ErrBackendID, []string{`backends[0].id: "  "`, "is empty"}},
		{"duplicate backend id", "backends: [{id: a, url: 'http://h:1'}, {id: a, url: 'http://h:2'}]", gateway.ErrDuplicateBackend, []string{"backends[1].id", `"a"`}},
		{"bad url scheme", "backends: [{id: a, url: 'ftp://h:1'}]", gateway.ErrBackendURL, []string{"backends[0].url", "ftp://h:1"}},
		{"url without host", "backends: [{id: a, url: 'http://'}]", gateway.ErrBackendURL, []string{"backends[0].url", "http://"}},
		{"unparsable url", "backends: [{id: a, url: 'http://h:port'}]", gateway.ErrBackendURL, []string{"backends[0].url", "http://h:port"}},
		// user:password@ would not be sent: refused, the password never repeated (tester27).
		{"url port out of range", "backends: [{id: a, url: 'http://127.0.0.1:99999'}]", gateway.ErrBackendURL, []string{"backends[0].url", "127.0.0.1:99999", "port must be 1..65535"}},
		{"url port 0", "backends: [{id: a, url: 'http://h:0/v1'}]", gateway.ErrBackendURL, []string{"backends[0].url", "port must be 1..65535"}},
		{"url port 65536", "backends: [{id: a, url: 'https://[::1]:65536'}]", gateway.ErrBackendURL, []string{"backends[0].url", "port must be 1..65535"}},
		{"url with credentials", "backends: [{id: a, url: 'http://op:s3cret@h:1'}]", gateway.ErrBackendURL, []string{"backends[0].url", "http://op:xxxxx@h:1", "user:password@ is not allowed"}},
		{"unparsable url with credentials", "backends: [{id: a, url: 'http://op:s3 cret@h:port'}]", gateway.ErrBackendURL, []string{"backends[0].url", "http://xxxxx@h:port", "not a URL"}},
		{"negative weight", "backends: [{id: a, url: 'http://h:1', weight: -1}]", gateway.ErrBackendWeight, []string{"backends[0].weight", "-1"}},
		{"infinite weight", "backends: [{id: a, url: 'http://h:1', weight: .inf}]", gateway.ErrBackendWeight, []string{"backends[0].weight", "Inf"}},
		{"listen without port", "listen: localhost\n" + minimal, gateway.ErrListenAddress, []string{"listen", "localhost"}},
		{"listen bad port", "listen: '127.0.0.1:99999'\n" + minimal, gateway.ErrListenAddress, []string{"listen", "99999"}},
		{"negative ttl", "affinity: {sticky_ttl_seconds: -5}\n" + minimal, gateway.ErrAffinityConfig, []string{"sticky_ttl_seconds", "-5"}},
		// yaml.v3 alone would truncate these into the int fields (0.9 -> 0 turns affinity off).
		{"fractional ttl", "affinity: {sticky_ttl_seconds: 0.9}\n" + minimal, gateway.ErrConfigSyntax, []string{"sticky_ttl_seconds", "0.9"}},
		{"negative fractional ttl", "affinity: {sticky_ttl_seconds: -0.5}\n" + minimal, gateway.ErrConfigSyntax, []string{"sticky_ttl_seconds", "-0.5"}},
		{"fractional tier ttl", "affinity: {tiers: {batch: {sticky_ttl_seconds: 2.5}}}\n" + minimal, gateway.ErrConfigSyntax, []string{"tiers.batch.sticky_ttl_seconds", "2.5"}},
		{"fractional max_bindings", "affinity: {max_bindings: 2.7}\n" + minimal, gateway.ErrConfigSyntax, []string{"max_bindings", "2.7"}},
		{"load key past int64", "affinity: {load: {balance_factor: 1.25, queued_request_cost: 1e19}}\n" + minimal, gateway.ErrConfigSyntax, []string{"load.queued_request_cost", "out of range"}},
		{"load key past int64, digits", "affinity: {load: {balance_factor: 1.25, queued_request_cost: 99999999999999999999}}\n" + minimal, gateway.ErrConfigSyntax, []string{"load.queued_request_cost", "out of range"}},
		{"load key past uint64 range start", "affinity: {load: {balance_factor: 1.25, queued_request_cost: 9999999999999999999}}\n" + minimal, gateway.ErrConfigSyntax, []string{"load.queued_request_cost", "out of range"}},
		{"load key past float64", "affinity: {load: {balance_factor: 1e400}}\n" + minimal, gateway.ErrConfigSyntax, []string{"load.balance_factor", "1e400"}},
		{"negative min_request_cost", "affinity: {load: {balance_factor: 1.25, min_request_cost: -1}}\n" + minimal, gateway.ErrAffinityConfig, []string{"load.min_request_cost: -1"}},
		{"min_request_cost above 2^24", "affinity: {load: {balance_factor: 1.25, min_request_cost: 16777217}}\n" + minimal, gateway.ErrAffinityConfig, []string{"load.min_request_cost: 16777217"}},
		{"min_request_cost without balance_factor", "affinity: {load: {min_request_cost: 1024}}\n" + minimal, gateway.ErrAffinityConfig, []string{"load.min_request_cost has no effect without load.balance_factor"}},
		{"fractional min_request_cost", "affinity: {load: {balance_factor: 1.25, min_request_cost: 0.5}}\n" + minimal, gateway.ErrConfigSyntax, []string{"load.min_request_cost", "0.5"}},
		{"negative max_body_bytes", "max_body_bytes: -1\n" + minimal, gateway.ErrMaxBodyBytes, []string{"max_body_bytes", "-1"}},
		{"bad session header", "session_headers: ['X Session']\n" + minimal, gateway.ErrHeaderName, []string{"session_headers[0]", "X Session", "not a valid HTTP header name", "RFC 9110 token"}},
		{"session header with colon", "session_headers: ['Bad Header:']\n" + minimal, gateway.ErrHeaderName, []string{`session_headers[0]: "Bad Header:"`, "not a valid HTTP header name", "RFC 9110 token"}},
		{"empty session header", "session_headers: [X-Session-ID, '']\n" + minimal, gateway.ErrHeaderName, []string{`session_headers[1]: ""`, "is empty", "HTTP header name"}},
		{"bad tier header", "tier_header: 'a:b'\n" + minimal, gateway.ErrHeaderName, []string{"tier_header", "a:b", "not a valid HTTP header name", "RFC 9110 token"}},
		{"bad parent session header", "parent_session_headers: [X-Parent, 'bad header']\n" + minimal, gateway.ErrHeaderName, []string{`parent_session_headers[1]: "bad header"`, "not a valid HTTP header name", "RFC 9110 token"}},
		{"bad tenant header", "tenant: {header: 'x/y'}\n" + minimal, gateway.ErrHeaderName, []string{`tenant.header: "x/y"`, "not a valid HTTP header name", "RFC 9110 token"}},
		{"empty session headers", "session_headers: []\n" + minimal, gateway.ErrNoSessionHeaders, []string{"session_headers: empty list", "affinity would be off", "X-Session-ID", "sticky_ttl_seconds: 0"}},
		{"Host as session header", "session_headers: [Host]\n" + minimal, gateway.ErrHeaderName, []string{`session_headers[0]: "Host"`, "never matches"}},
		{"Connection as session header", "session_headers: [X-Session-ID, connection]\n" + minimal, gateway.ErrHeaderName, []string{`session_headers[1]: "connection"`, "hop-by-hop"}},
		{"Transfer-Encoding as session header", "session_headers: [Transfer-Encoding]\n" + minimal, gateway.ErrHeaderName, []string{`session_headers[0]: "Transfer-Encoding"`, "never matches"}},
		{"Content-Length as session header", "session_headers: [Content-Length]\n" + minimal, gateway.ErrHeaderName, []string{`session_headers[0]: "Content-Length"`, "body's length"}},
		{"TE as parent session header", "parent_session_headers: [TE]\n" + minimal, gateway.ErrHeaderName, []string{`parent_session_headers[0]: "TE"`, "hop-by-hop"}},
		{"Host as tier header", "tier_header: host\n" + minimal, gateway.ErrHeaderName, []string{`tier_header: "host"`, "never matches"}},
		{"Upgrade as tenant header", "tenant: {header: Upgrade}\n" + minimal, gateway.ErrHeaderName, []string{`tenant.header: "Upgrade"`, "hop-by-hop"}},
		{"tier header is a default session header", "tier_header: x-session-id\n" + minimal, gateway.ErrHeaderConflict, []string{`tier_header: "x-session-id" is also session_headers[0]`, "unknown_tier"}},
		{"tier header is a session header", "session_headers: [A, B]\ntier_header: b\n" + minimal, gateway.ErrHeaderConflict, []string{`tier_header: "b" is also session_headers[1]`}},
		{"tier header is a parent session header", "tier_header: X-Parent-Session-ID\n" + minimal, gateway.ErrHeaderConflict, []string{"is also parent_session_headers[0]"}},
		{"tier header is the tenant header", "tier_header: X-Tenant\ntenant: {header: X-Tenant}\n" + minimal, gateway.ErrHeaderConflict, []string{"is also tenant.header"}},
		{"tier header is Authorization with tenant.api_key", "tier_header: Authorization\ntenant: {api_key: true}\n" + minimal, gateway.ErrHeaderConflict, []string{`tier_header: "Authorization" is also tenant.api_key`}},
		{"tier header is authorization with tenant.api_key", "tier_header: authorization\ntenant: {api_key: true, header: X-Tenant}\n" + minimal, gateway.ErrHeaderConflict, []string{`tier_header: "authorization" is also tenant.api_key`}},
		{"empty model tier", "model_tiers: {m: ''}\n" + minimal, gateway.ErrTierName, []string{"model_tiers", `"m"`}},
		{"empty model name", "model_tiers: {'': t}\n" + minimal, gateway.ErrTierName, []string{`model_tiers[""]: empty model name`}},
		{"blank model name", "model_tiers: {' ': t}\n" + minimal, gateway.ErrTierName, []string{`model_tiers[" "]: blank model name`}},
		{"blank model name, tab and newline", "model_tiers: {\"\\t\\n\": t, m: t}\n" + minimal, gateway.ErrTierName, []string{`model_tiers["\t\n"]: blank model name`}},
		{"blank model tier", "model_tiers: {m: ' '}\n" + minimal, gateway.ErrTierName, []string{`model_tiers["m"]: blank tier`}},
		{"blank backend tier", "backends: [{id: a, url: 'http://127.0.0.1:1', tier: ' '}]\n", gateway.ErrTierName, []string{"backends[0].tier", "blank tier name"}},
		{"blank affinity tier name", "affinity: {tiers: {' ': {sticky_ttl_seconds: 5}}}\n" + minimal, gateway.ErrTierName, []string{`affinity.tiers[" "]: blank tier name`}},
		{"empty affinity tier name", "affinity: {tiers: {'': {sticky_ttl_seconds: 5}}}\n" + minimal, gateway.ErrTierName, []string{`affinity.tiers[""]: empty tier name`}},
		{"duplicate session header", "session_headers: [X-A, X-B, x-a]\n" + minimal, gateway.ErrHeaderName, []string{`session_headers[2]: "x-a": listed twice (also session_headers[0])`}},
		{"duplicate parent session header", "parent_session_headers: [X-P, X-P]\n" + minimal, gateway.ErrHeaderName, []string{`parent_session_headers[1]: "X-P": listed twice (also parent_session_headers[0])`}},
		{"parent session header is a session header", "parent_session_headers: [x-session-id]\n" + minimal, gateway.ErrHeaderConflict, []string{`parent_session_headers[0]: "x-session-id" is also session_headers[0]`, "its own parent"}},
		{"tenant header is a session header", "tenant: {header: X-Session-ID}\n" + minimal, gateway.ErrHeaderConflict, []string{`tenant.header: "X-Session-ID" is also session_headers[0]`}},
		{"tenant header is a parent session header", "tenant: {header: X-Parent-Session-ID}\n" + minimal, gateway.ErrHeaderConflict, []string{`tenant.header: "X-Parent-Session-ID" is also parent_session_headers[0]`}},
		{"secret_env with a space", "tenant: {api_key: true, secret_env: 'A B'}\n" + minimal, gateway.ErrTenantConfig, []string{`tenant.secret_env: "A B": not an environment variable name`}},
		{"secret_env starting with a digit", "tenant: {header: X-T, secret_env: 1SECRET}\n" + minimal, gateway.ErrTenantConfig, []string{`tenant.secret_env: "1SECRET"`}},
		{"secret_env with =", "tenant: {header: X-T, secret_env: '='}\n" + minimal, gateway.ErrTenantConfig, []string{`tenant.secret_env: "="`}},
		{"backend id too long", "backends: [{id: " + strings.Repeat("b", 257) + ", url: 'http://h:1'}]\n", gateway.ErrBackendID, []string{"backends[0].id", "257 bytes (max 256)"}},
		{"backend id with NUL", "backends: [{id: \"a\\0b\", url: 'http://h:1'}]\n", gateway.ErrBackendID, []string{"backends[0].id", `control byte '\x00' at offset 1`}},
		{"backend id with a newline", "backends: [{id: \"a\\nb\", url: 'http://h:1'}]\n", gateway.ErrBackendID, []string{"backends[0].id", `control byte '\n'`}},
		{"budget without room for the salted copy", "max_body_bytes: 1048576\nlimits: {max_inflight_bytes: 2097152}\ntenant: {api_key: true, cache_salt: true}\n" + minimal, gateway.ErrLimitsConfig, []string{"limits.max_inflight_bytes: 2097152", "2 x max_body_bytes + 64 (2097216)", "tenant.cache_salt"}},
		{"budget without room for the stream_usage copy", "max_body_bytes: 1048576\nlimits: {max_inflight_bytes: 2097152}\nstream_usage: true\n" + minimal, gateway.ErrLimitsConfig, []string{"limits.max_inflight_bytes: 2097152", "2 x max_body_bytes + 64 (2097216)", "stream_usage on"}},
		{"budget without room for both copies", "max_body_bytes: 1048576\nlimits: {max_inflight_bytes: 3145728}\nstream_usage: true\ntenant: {api_key: true, cache_salt: true}\n" + minimal, gateway.ErrLimitsConfig, []string{"limits.max_inflight_bytes: 3145728", "3 x max_body_bytes + 128 (3145856)", "tenant.cache_salt and stream_usage on"}},
		{"model tier too long", "model_tiers: {m: " + strings.Repeat("t", 256) + "}\n" + minimal, gateway.ErrTierName, []string{`model_tiers["m"]`, "256 bytes (max 255)"}},
		{"backend tier too long", "backends: [{id: a, url: 'http://127.0.0.1:1', tier: " + strings.Repeat("t", 256) + "}]\n", gateway.ErrTierName, []string{"backends[0].tier", `"a"`, "256 bytes (max 255)"}},
		{"health path", "health: {path: health}\n" + minimal, gateway.ErrHealthConfig, []string{"health.path", "health"}},
		{"health path with a space", "health: {path: '/h h'}\n" + minimal, gateway.ErrHealthConfig, []string{`health.path: "/h h" has byte ' ' at offset 2`}},
		{"health path with a control byte", "health: {path: \"/h\\th\"}\n" + minimal, gateway.ErrHealthConfig, []string{`health.path: "/h\th" has byte '\t'`}},
		{"health interval", "health: {interval_seconds: -1}\n" + minimal, gateway.ErrHealthConfig, []string{"health.interval_seconds", "-1"}},
		{"passive recheck", "health: {passive_recheck_seconds: -2}\n" + minimal, gateway.ErrPassiveRecheck, []string{"passive_recheck_seconds", "-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte(tt.yaml))
			require.Error(t, err)
			assert.ErrorIs(t, err, gateway.ErrInvalidConfig)
			assert.ErrorIs(t, err, tt.want)
			for _, s := range tt.contains {
				assert.Contains(t, err.Error(), s)
			}
			assert.NotContains(t, err.Error(), "s3", "no password in the error")
		})
	}
}

// A misspelt key under affinity.load or an affinity.tiers entry is reported like one in
// any other section (key, line and the Go type it is not in), not with the whole
// anonymous struct the affinity section decodes its numbers into (~700 bytes).
func TestParseConfigUnknownAffinityKeyIsShort(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"affinity:\n  load:\n    balance_factor: 1.25\n    spill_cost_wieght: 5\n", `line 4: unknown key "spill_cost_wieght" in affinity.load`},
		{"affinity:\n  tiers:\n    gold: {sticky_ttl: 5}\n", `line 3: unknown key "sticky_ttl" in affinity.tiers.<name>`},
		{"affinity:\n  sticky_ttl_secs: 5\n", `line 2: unknown key "sticky_ttl_secs" in affinity`},
	} {
		_, err := gateway.ParseConfig([]byte(tc.doc + minimal))
		require.Error(t, err, tc.doc)
		assert.ErrorIs(t, err, gateway.ErrUnknownKey)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), "interface {}")
		assert.Less(t, len(err.Error()), 200, err.Error())
	}
}

// A backend id is a metric label value: invalid UTF-8 (which YAML cannot carry, but a
// Config built in code can) is refused; printable non-ASCII text and 256 bytes are fine.
func TestValidateBackendID(t *testing.T) {
	cfg := func(id string) gateway.Config {
		return gateway.Config{Backends: []gateway.BackendConfig{{ID: id, URL: "http://h:1"}}}.WithDefaults()
	}
	err := cfg("a\xffb").Validate()
	assert.ErrorIs(t, err, gateway.ErrBackendID)
	assert.ErrorContains(t, err, "not valid UTF-8")
	for _, id := range []string{"vllm-ä-1", strings.Repeat("b", gateway.MaxBackendIDBytes), "a b"} {
		assert.NoError(t, cfg(id).Validate(), id)
	}
}

// Errors found while decoding the affinity section (by affinity.Config.UnmarshalYAML)
// say "invalid config" once, like every other configuration error, and name the section.
func TestParseConfigAffinityDecodeErrorsSayInvalidOnce(t *testing.T) {
	for _, tc := range []struct{ doc, prefix string }{
		{"affinity: {sticky_ttl_seconds: 0.5}\n" + minimal, "gateway: invalid config: affinity: "},
		// A wrong type: its line and key path, as for every other section (tester52).
		{"affinity: {sticky_ttl_seconds: abc}\n" + minimal, "gateway: invalid config: line 1: affinity.sticky_ttl_seconds: "},
		{"affinity: {max_bindings: 1, bogus: 1}\n" + minimal, "gateway: invalid config: affinity: "},
		{"affinity: {sticky_ttl_seconds: -5}\n" + minimal, "gateway: invalid config: affinity: "}, // found by Validate, not decoding
	} {
		doc := tc.doc
		_, err := gateway.ParseConfig([]byte(doc))
		require.Error(t, err, doc)
		assert.ErrorIs(t, err, affinity.ErrInvalidConfig, doc)
		assert.Equal(t, 1, strings.Count(err.Error(), "invalid config"), "%s: %v", doc, err)
		assert.True(t, strings.HasPrefix(err.Error(), tc.prefix), "%s: %v", doc, err)
	}
}

// session_headers omitted or null takes the defaults; parent_session_headers: [] is off
// (an empty session_headers is an error, above).
func TestParseConfigHeaderLists(t *testing.T) {
	for _, doc := range []string{minimal, "session_headers: ~\n" + minimal, "session_headers:\n" + minimal} {
		cfg, err := gateway.ParseConfig([]byte(doc))
		require.NoError(t, err, doc)
		assert.Equal(t, gateway.DefaultSessionHeaders(), cfg.SessionHeaders, doc)
	}
	cfg, err := gateway.ParseConfig([]byte("parent_session_headers: []\n" + minimal))
	require.NoError(t, err)
	assert.Empty(t, cfg.ParentSessionHeaders)
	_, err = gateway.New(gateway.Config{Backends: []gateway.BackendConfig{{ID: "a", URL: "http://h:1"}}, SessionHeaders: []string{}})
	assert.ErrorIs(t, err, gateway.ErrNoSessionHeaders, "an empty (not nil) list given in code")
}

// binding_snapshot is checked where the bindings will be written, at start: a missing
// directory, a file as the directory, or a directory or a device as the path is refused
// with the key named (a device as "a device, not a regular file"; before, as its mode
// string "Dc---------": tester32 #7b); a good path leaves no file behind.
func TestNewChecksBindingSnapshot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	tests := []struct {
		name, path string
		contains   []string // "" path: no error
	}{
		{"missing directory", filepath.Join(dir, "nonexistent", "x.snap"), []string{"binding_snapshot", "nonexistent", "cannot create a file in directory", "no such file or directory"}},
		{"file as directory", filepath.Join(file, "x.snap"), []string{"binding_snapshot", "not a directory"}},
		{"a directory", dir, []string{"binding_snapshot", "is a directory"}},
		{"a device", os.DevNull, []string{"binding_snapshot", "is a device, not a regular file"}},
		{"good", filepath.Join(dir, "bindings.snap"), nil},
		{"off", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := gateway.Config{Backends: []gateway.BackendConfig{{ID: "a", URL: "http://h:1"}}, BindingSnapshot: tt.path}
			require.NoError(t, cfg.WithDefaults().Validate(), "Validate does no I/O")
			g, err := gateway.New(cfg)
			if tt.contains == nil {
				require.NoError(t, err)
				g.Close()
				entries, err := os.ReadDir(dir)
				require.NoError(t, err)
				require.Len(t, entries, 1, "only the test's own file: the check removed its temporary file")
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, gateway.ErrInvalidConfig)
			assert.ErrorIs(t, err, gateway.ErrBindingSnapshot)
			for _, s := range tt.contains {
				assert.Contains(t, err.Error(), s)
			}
			assert.NotContains(t, err.Error(), "------", "a file's type in words, not its mode string (was Dc---------)")
		})
	}
}

func TestNewValidates(t *testing.T) {
	_, err := gateway.New(gateway.Config{})
	assert.ErrorIs(t, err, gateway.ErrNoBackends)
	_, err = gateway.New(gateway.Config{Backends: []gateway.BackendConfig{{ID: "a", URL: "http://h:1"}}, MaxBodyBytes: -3})
	assert.ErrorIs(t, err, gateway.ErrMaxBodyBytes)
}

func TestLoadConfigShippedExample(t *testing.T) {
	cfg, err := gateway.LoadConfig(filepath.Join("..", "configs", "gateway.yaml"))
	require.NoError(t, err)
	assert.Len(t, cfg.Backends, 3)
	require.NotNil(t, cfg.Affinity.StickyTTLSeconds)
	assert.Equal(t, int64(1800), *cfg.Affinity.StickyTTLSeconds)
	assert.Equal(t, new(true), cfg.Health.Enabled)
	assert.Equal(t, 1.25, cfg.Affinity.Load.BalanceFactor, "the shipped config turns load awareness on")
	require.NotNil(t, cfg.Affinity.Load.SpillCostWeight)
	assert.Equal(t, 5.0, *cfg.Affinity.Load.SpillCostWeight)
	assert.Equal(t, 16000.0, cfg.Affinity.Load.DrainTokensPerSecond, "the shipped config turns the drain model on")
	assert.Equal(t, 2.5, cfg.Affinity.Load.RetentionGuardFactor)
	assert.Equal(t, 0.001, cfg.Affinity.Load.ColdCacheRatio)
	assert.Equal(t, int64(4096), cfg.Affinity.Load.MinRequestCost, "the shipped config sets the per-request floor")
	assert.True(t, cfg.StreamUsage, "the shipped config asks streams for their usage")
	assert.Equal(t, "127.0.0.1:9901", cfg.AdminListen, "the shipped config serves the probes and /metrics on an admin listener")
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	g.Close()
}

// TestParseConfigMinRequestCost: load.min_request_cost flows from the affinity block to
// the Scheduler, whose load view then counts each open lease at least that much.
func TestParseConfigMinRequestCost(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte("affinity: {load: {balance_factor: 1.25, min_request_cost: 1024}}\n" + minimal))
	require.NoError(t, err)
	assert.Equal(t, int64(1024), cfg.Affinity.Load.MinRequestCost)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	g.Close()
}

func TestLoadConfigMissingFile(t *testing.T) {
	_, err := gateway.LoadConfig(filepath.Join(t.TempDir(), "nope.yaml"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "got %v", err)
}
