package gateway_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Backends that name one server under two IDs start (a server listed twice is accepted
// by HAProxy and nginx too) with one warning naming them; a reload warns again only when
// the list changes (tester51, tester52: accepted without a word).
func TestSharedBackendURLWarns(t *testing.T) {
	const warn = "backends share a URL"
	backends := func(urls ...string) []gateway.BackendConfig {
		var bs []gateway.BackendConfig
		for i, u := range urls {
			bs = append(bs, gateway.BackendConfig{ID: string(rune('a' + i)), URL: u})
		}
		return bs
	}
	tests := []struct {
		name   string
		urls   []string
		shared string // the logged list, as JSON; "" = no warning
	}{
		{"distinct", []string{"http://127.0.0.1:9", "http://127.0.0.1:10", "https://127.0.0.1:9"}, ""},
		{"same", []string{"http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:9"}, `["a,c -> http://127.0.0.1:9"]`},
		{"case and trailing slash", []string{"http://Host.Example:9/v1/", "HTTP://host.example:9/v1"}, `["a,b -> http://Host.Example:9/v1/"]`},
		{"another prefix is another server", []string{"http://127.0.0.1:9/a", "http://127.0.0.1:9/b"}, ""},
		{"two groups", []string{"http://h:1", "http://h:2", "http://h:1", "http://h:2", "http://h:2"}, `["a,c -> http://h:1","b,d,e -> http://h:2"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, logs := captureLogs()
			g, err := gateway.New(gateway.Config{Backends: backends(tt.urls...)}, gateway.WithLogger(log))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			out := logs.String()
			if tt.shared == "" {
				assert.NotContains(t, out, warn)
				return
			}
			assert.Equal(t, 1, strings.Count(out, warn), out)
			assert.Contains(t, out, `"shared":`+tt.shared)
		})
	}

	log, logs := captureLogs()
	g, err := gateway.New(gateway.Config{Backends: backends("http://h:1", "http://h:1")}, gateway.WithLogger(log))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	next := g.Config()
	next.Backends = backends("http://h:1", "http://h:1", "http://h:3") // same pair: said already
	require.NoError(t, g.Reload(next))
	assert.Equal(t, 1, strings.Count(logs.String(), warn), logs.String())
	next.Backends = backends("http://h:1", "http://h:2", "http://h:2") // another pair: said
	require.NoError(t, g.Reload(next))
	assert.Equal(t, 2, strings.Count(logs.String(), warn), logs.String())
	assert.Contains(t, logs.String(), `"shared":["b,c -> http://h:2"]`)
}
