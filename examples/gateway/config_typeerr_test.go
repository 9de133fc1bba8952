package gateway_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A value of the wrong type is a syntax error that names its key (and line), not only
// the line and a Go type (newuser47).
func TestParseConfigWrongTypeNamesKey(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"seconds", minimal + "timeouts:\n  read_body_seconds: abc\n",
			"line 5: timeouts.read_body_seconds: cannot unmarshal !!str `abc` into float64 (want a number of seconds)"},
		{"long value", minimal + "drain_seconds: twelve-seconds-or-so\n",
			"line 4: drain_seconds: cannot unmarshal !!str `twelve-...` into float64 (want a number of seconds)"},
		{"in a flow map", "backends:\n  - {id: a, url: \"http://127.0.0.1:8001\", weight: heavy}\n",
			"line 2: backends[0].weight: cannot unmarshal !!str `heavy` into float64 (want a number)"},
		{"a list for a number", minimal + "max_body_bytes: [1, 2]\n",
			"line 4: max_body_bytes: cannot unmarshal !!seq into int64 (want a whole number)"},
		{"two at once", minimal + "drain_seconds: x\nmax_body_bytes: y\n",
			"line 4: drain_seconds: cannot unmarshal !!str `x` into float64 (want a number of seconds); line 5: max_body_bytes: cannot unmarshal !!str `y` into int64 (want a whole number)"},
		// tester49: the same value earlier on the line, the same bad value twice, lists
		// and maps where a scalar goes, aliases and merge keys.
		{"same value under another key", "backends:\n  - {id: abc, url: \"http://127.0.0.1:8001\", weight: abc}\n",
			"line 2: backends[0].weight: cannot unmarshal !!str `abc` into float64 (want a number)"},
		{"same long value", "backends:\n  - {id: twelve-abcdef, url: \"http://127.0.0.1:8001\", weight: twelve-xyzxyz}\n",
			"line 2: backends[0].weight: cannot unmarshal !!str `twelve-...` into float64 (want a number)"},
		{"flow map, two keys", "{backends: [{id: a, url: \"http://127.0.0.1:8001\"}], tier_header: abc, drain_seconds: abc}\n",
			"line 1: drain_seconds: cannot unmarshal !!str `abc` into float64 (want a number of seconds)"},
		{"the same bad value twice", "backends: [{id: a, url: \"http://127.0.0.1:8001\", weight: x}, {id: b, url: \"http://127.0.0.1:8002\", weight: x}]\n",
			"line 1: backends[0].weight: cannot unmarshal !!str `x` into float64 (want a number); line 1: backends[1].weight: cannot unmarshal !!str `x` into float64 (want a number)"},
		{"a map for a number", "backends:\n  - {id: a, url: \"http://127.0.0.1:8001\", tier: \"\", weight: {}}\n",
			"line 2: backends[0].weight: cannot unmarshal !!map into float64 (want a number)"},
		{"a list in a flow map", "{backends: [{id: a, url: \"http://127.0.0.1:8001\"}], tier_header: \"\", drain_seconds: []}\n",
			"line 1: drain_seconds: cannot unmarshal !!seq into float64 (want a number of seconds)"},
		{"a list for a string in a list", minimal + "session_headers: [[a]]\n",
			"line 4: session_headers[0]: cannot unmarshal !!seq into string (want a string)"},
		{"a list for a string in a map", minimal + "model_tiers: {m: [x], n: x}\n",
			"line 4: model_tiers[\"m\"]: cannot unmarshal !!seq into string (want a string)"},
		{"an alias", "backends:\n  - id: &v abc\n    url: \"http://127.0.0.1:8001\"\n    weight: *v\n",
			"line 2: backends[0].weight: cannot unmarshal !!str `abc` into float64 (want a number)"},
		{"an alias to another section", minimal + "timeouts:\n  read_body_seconds: &v abc\ndrain_seconds: *v\n",
			"line 5: timeouts.read_body_seconds: cannot unmarshal !!str `abc` into float64 (want a number of seconds); line 5: drain_seconds: cannot unmarshal !!str `abc` into float64 (want a number of seconds)"},
		{"a merge key", "backends:\n  - &b {id: a, url: \"http://127.0.0.1:8001\", weight: heavy}\n  - <<: *b\n    id: b\n",
			"line 2: backends[0].weight: cannot unmarshal !!str `heavy` into float64 (want a number); line 2: backends[1].weight: cannot unmarshal !!str `heavy` into float64 (want a number)"},
		// tester52: the affinity section decodes itself (affinity.Config.UnmarshalYAML);
		// its wrong-type values are named too, not "affinity: yaml: unmarshal errors".
		{"affinity ttl", minimal + "affinity: {sticky_ttl_seconds: abc}\n",
			"invalid config: line 4: affinity.sticky_ttl_seconds: cannot unmarshal !!str `abc` into int64 (want a whole number of seconds)"},
		{"affinity tier ttl", minimal + "affinity:\n  tiers: {gold: {sticky_ttl_seconds: x}}\n",
			"invalid config: line 5: affinity.tiers[\"gold\"].sticky_ttl_seconds: cannot unmarshal !!str `x` into int64 (want a whole number of seconds)"},
		{"a word for a bool", minimal + "health: {enabled: maybe}\n",
			"line 4: health.enabled: cannot unmarshal !!str `maybe` into bool (want true or false)"},
		{"a word for a backend", "backends: [abc]\n",
			"line 1: backends[0]: cannot unmarshal !!str `abc` into gateway.BackendConfig (want a map)"},
		{"affinity list for a number", minimal + "affinity: {max_bindings: [1]}\n",
			"invalid config: line 4: affinity.max_bindings: cannot unmarshal !!seq into int (want a whole number)"},
	}
	var many strings.Builder // 25 bad values: 20 listed, then the count
	many.WriteString(minimal + "session_headers: [")
	for range 25 {
		many.WriteString("[x], ")
	}
	many.WriteString("]\n")
	tests = append(tests, struct{ name, yaml, want string }{"many", many.String(),
		"line 4: session_headers[19]: cannot unmarshal !!seq into string (want a string); (+5 more)"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte(tt.yaml))
			require.ErrorIs(t, err, gateway.ErrConfigSyntax)
			require.ErrorIs(t, err, gateway.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
