package gateway_test

import (
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
			"line 5: timeouts.read_body_seconds: cannot unmarshal !!str `abc` into float64"},
		{"long value", minimal + "drain_seconds: twelve-seconds-or-so\n",
			"line 4: drain_seconds: cannot unmarshal !!str `twelve-...` into float64"},
		{"in a flow map", "backends:\n  - {id: a, url: \"http://127.0.0.1:8001\", weight: heavy}\n",
			"line 2: backends[0].weight: cannot unmarshal !!str `heavy` into float64"},
		{"a list for a number", minimal + "max_body_bytes: [1, 2]\n",
			"line 4: max_body_bytes: cannot unmarshal !!seq into int64"},
		{"two at once", minimal + "drain_seconds: x\nmax_body_bytes: y\n",
			"line 4: drain_seconds: cannot unmarshal !!str `x` into float64; line 5: max_body_bytes: cannot unmarshal !!str `y` into int64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte(tt.yaml))
			require.ErrorIs(t, err, gateway.ErrConfigSyntax)
			require.ErrorIs(t, err, gateway.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
